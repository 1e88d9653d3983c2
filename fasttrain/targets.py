"""Time to a target: the first metrics row of a run where a mean episode metric reaches a value.

A ``Target`` is an ``on_row`` callback of ``fasttrain.run.runner.run``: it records the training
seconds (``time_s``, counted from the first iteration, so start-up and compilation of the games
are not in it) and the environment steps of the first row whose mean return or score reaches
the value, and with ``stop`` ends the run there. ``fasttrain bench`` and ``fasttrain sweep`` use
it; the mean is over the episodes that ended since the row before (``log.csv_every`` sets how
many iterations that spans).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COLUMNS = {"return": "charts/episodic_return", "score": "charts/score"}  # metric -> column


@dataclass
class Target:
    metric: str
    """return | score: the mean episode metric watched"""
    value: float
    """the value to reach (>=)"""
    stop: bool = True
    """end the run at the first row that reaches it"""
    seconds: float | None = None
    """training seconds at the first row that reached it (None: not reached)"""
    steps: int | None = None
    """environment steps at that row"""
    best: float = -math.inf
    """the highest value seen in any row"""
    last: float = math.nan
    """the value in the last row that had one"""

    def __post_init__(self):
        if self.metric not in COLUMNS:
            raise ValueError(f"unknown target metric {self.metric!r}; valid: {', '.join(COLUMNS)}")

    @property
    def reached(self) -> bool:
        return self.seconds is not None

    def read(self, row: dict) -> float:
        """The row's mean of the watched metric (NaN: no episode ended in it)."""
        return float(row.get(COLUMNS[self.metric], math.nan))

    def __call__(self, row: dict) -> bool:
        value = self.read(row)
        if math.isfinite(value):
            self.last = value
            self.best = max(self.best, value)
            if self.seconds is None and value >= self.value:
                self.seconds, self.steps = float(row["time_s"]), int(row["global_step"])
        return self.stop and self.reached


def watch(*targets: Target):
    """One ``on_row`` callback for several targets: the run stops when every target with
    ``stop`` set has been reached (never, when none has it)."""
    stoppers = [t for t in targets if t.stop]

    def on_row(row: dict) -> bool:
        for target in targets:
            target(row)
        return bool(stoppers) and all(t.reached for t in stoppers)

    return on_row

"""A run's numbers: the episode means, the metrics.csv row and the console line.

The row is what every sink writes (``metrics.csv``, TensorBoard, W&B) and what ``on_row``
callbacks see: ``global_step``, ``time_s``, ``sps``, the episode means (``charts/...``, CleanRL's
names), the learning rate, the curriculum stage where there is one, the learner's losses
(``losses/...``) and where the time went (``time/...``, fractions of the row's wall time).
"""

from __future__ import annotations

import math

from fasttrain import distributed

NO_EPISODE = {"return": math.nan, "length": math.nan, "score": math.nan}
STAGE_COLUMN = "curriculum/stage"  # 1-based stage the row's last iteration played in
# short names of the columns every learner shares, in the console line; a learner adds its own
# (``Learner.short_names``) and any other column prints its last path component
SHORT = {"losses/skipped_updates": "skipped"}


def combine(batches: list[dict]) -> dict:
    """Episode means over ``env.stats()`` batches, weighted by their episode counts (one batch
    as it is, so a row of one batch is exactly what the env reported)."""
    if len(batches) == 1:
        return {k: batches[0][k] for k in NO_EPISODE}
    count = sum(b["episodes"] for b in batches)
    return {k: sum(b[k] * b["episodes"] for b in batches) / count for k in NO_EPISODE}


class Episodes:
    """The episode statistics of a run: ``env.stats()`` batches read since the last row (over
    every rank's episodes), and the means the last row showed, which a row without a finished
    episode shows again. Both go into checkpoints, so a resumed run writes the same rows."""

    def __init__(self, trainer, ranks, state: dict | None = None):
        self.trainer, self.ranks = trainer, ranks
        state = state or {}
        self.means = dict(state.get("episode", NO_EPISODE))
        self.batches = list(state.get("episode_batches", []))

    def read(self) -> dict:
        """This iteration's stats (clearing the env's sums); kept for the next row."""
        trainer = self.trainer
        stats = distributed.episode_stats(trainer.env.stats(), self.ranks, trainer.device)
        if stats:
            self.batches.append(stats)
        return stats

    def take(self) -> dict:
        """The means for a row: over the batches read since the last row, or the last ones."""
        if self.batches:
            self.means = combine(self.batches)
            self.batches.clear()
        return self.means


def row(trainer, time_s: float, sps: float, episode: dict, losses: dict, split: dict, stage=None):
    """One metrics.csv row (see the module docstring)."""
    return {
        "global_step": trainer.global_step,
        "time_s": round(time_s, 3),
        "sps": round(sps, 1),
        "charts/episodic_return": episode["return"],
        "charts/episodic_length": episode["length"],
        "charts/score": episode["score"],
        "charts/learning_rate": trainer.learning_rate,
        **({} if stage is None else {STAGE_COLUMN: stage + 1}),
        **losses,
        **{f"time/{k}": round(v, 4) for k, v in split.items()},
    }


def duration(seconds: float) -> str:
    """``seconds`` as ``1h02m``, ``3m07s`` or ``42s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def eta(trainer, planned: int, first_step: int, start: float, now: float) -> str:
    """``"ETA 3m07s | "``: the time the run's remaining steps take at its mean speed since
    this process started (empty before a step, and at the end)."""
    done, left = trainer.global_step - first_step, planned - trainer.global_step
    if done <= 0 or left <= 0 or now <= start:
        return ""
    return f"ETA {duration(left * (now - start) / done)} | "


def console_line(
    step: int, sps: float, unit: str, eta_text: str, at: str, episode: dict, losses, split, short
) -> str:
    """The log line of an iteration boundary: steps, speed, time left, the episode means, the
    losses by their short names and where the time went."""
    names = {**SHORT, **short}
    return (
        f"step {step:>11,} | {sps:>9,.0f} {unit} | {eta_text}{at}"
        f"return {episode['return']:7.2f} | score {episode['score']:6.2f} | "
        f"len {episode['length']:6.1f} | "
        + " ".join(f"{names.get(k, k.split('/')[-1])} {v:.4g}" for k, v in losses.items())
        + " | "
        + " ".join(f"{k} {v:.0%}" for k, v in split.items())
    )

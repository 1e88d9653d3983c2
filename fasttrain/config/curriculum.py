"""Curriculum: ordered stages of game params, promoted at iteration boundaries.

Each stage is a set of game-param overrides on top of ``[game.<name>]`` (not on the stage
before it) that leave every buffer's shape as it is, so stages change with
``VecEnv.set_params`` between iterations: no recompilation, no reallocation, no reset. Episodes
in flight at a promotion finish under the new stage's params and count towards its window.

Promotion rule: the run moves from stage k to k + 1 after an iteration once it has spent at
least ``min_steps`` agent steps in stage k and the mean of ``promote_metric`` over the last
``promote_episodes`` finished episodes is at least ``promote_at``. The window works at batch
granularity: each iteration's ``env.stats()`` is one batch ``(mean, count)``, and the mean is
taken over the fewest most recent batches of the stage that hold ``promote_episodes`` episodes
or more (weighted by their counts), so it may cover a few more episodes than asked.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field

from fasttrain import games
from fasttrain.config.read import check_value
from fasttrain.errors import ConfigError
from fasttrain.kernels.env import shape_params

# promote_metric -> the key of env.stats() it reads; the names are metrics.csv's columns
PROMOTE_METRICS = {
    "charts/score": "score",
    "charts/episodic_return": "return",
    "charts/episodic_length": "length",
}


@dataclass(frozen=True)
class Stage:
    """One ``[[curriculum.stage]]`` table."""

    params: dict = field(default_factory=dict)
    """game-param overrides on top of [game.<name>] (not on the stage before); none may set
    buffer shapes (e.g. max_bots, the map size, num_snakes)"""
    promote_metric: str = "charts/score"
    """charts/score | charts/episodic_return | charts/episodic_length: what promotion reads"""
    promote_at: float | None = None
    """promote once the mean of promote_metric over the last promote_episodes episodes is >=
    this (required on every stage but the last; refused on the last)"""
    promote_episodes: int = 100
    """finished episodes the promotion mean covers (at least: whole iterations are counted)"""
    min_steps: int = 0
    """agent steps spent in the stage before it can be promoted"""


# A param that sizes buffers for another one that stages may change: the arena's ``max_bots``
# bot slots hold up to ``num_bots`` bots. Where no layer sets it, it is sized for the largest
# value the curriculum's stages ask for (``capacities``).
CAPACITIES = {"arena": {"max_bots": "num_bots"}}


def capacities(game: str, values: dict, stages) -> dict:
    """``{capacity: size}`` for each capacity param of ``game`` that ``values`` (the params the
    layers set) leaves out: the largest integer a stage of ``stages`` gives its param (a
    value of another type is left for the stage's own check to refuse)."""
    out = {}
    for capacity, param in CAPACITIES.get(game, {}).items():
        asked = [stage.params.get(param) for stage in stages]
        asked = [v for v in asked if isinstance(v, int) and not isinstance(v, bool)]
        if capacity not in values and asked and max(asked) > 0:
            out[capacity] = max(asked)
    return out


def stage_params(spec, base, stage: Stage):
    """The params of ``stage``: ``base`` (the [game.<name>] params) with its overrides
    (``make_params`` gives every value its field's type, so no stage compiles again)."""
    return spec.make_params(**{**vars(base), **stage.params})


# ------------------------------------------------------------------------------- CHECKS


STAGE_KEYS = tuple(f.name for f in dataclasses.fields(Stage))


def _stage(k: int, last: bool, table) -> Stage:
    """Stage ``k`` (1-based) of a [[curriculum.stage]] list, its keys checked."""
    where = f"curriculum stage {k}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table ([[curriculum.stage]])")
    for key in table:
        if key not in STAGE_KEYS:
            raise ConfigError(f"unknown key {key!r} in {where}; valid: {', '.join(STAGE_KEYS)}")
    values = dict(table)
    if not isinstance(values.get("params", {}), dict):
        raise ConfigError(
            f"{where} params must be a table of game params, e.g. params = {{ num_bots = 2 }}"
        )
    default = Stage()
    metric = values.get("promote_metric", default.promote_metric)
    values["promote_metric"] = check_value(
        f"{where} promote_metric", default.promote_metric, metric, tuple(PROMOTE_METRICS)
    )
    for key in ("promote_episodes", "min_steps"):
        values[key] = check_value(f"{where} {key}", 0, values.get(key, getattr(default, key)))
    if values["promote_episodes"] < 1:
        raise ConfigError(
            f"{where} promote_episodes must be >= 1, got {values['promote_episodes']}"
        )
    if values["min_steps"] < 0:
        raise ConfigError(f"{where} min_steps must be >= 0, got {values['min_steps']}")
    if last and "promote_at" in values:
        raise ConfigError(
            f"{where} is the last stage: it takes no promote_at (there is no stage to promote to)"
        )
    if not last and "promote_at" not in values:
        raise ConfigError(
            f"{where} needs promote_at: the mean {values['promote_metric']} that moves the run to "
            f"stage {k + 1} (only the last stage has none)"
        )
    if "promote_at" in values:
        values["promote_at"] = check_value(f"{where} promote_at", 0.0, values["promote_at"])
    return Stage(**values)


def parse_stages(table) -> tuple:
    """The stages of a layer's [curriculum] table (``[[curriculum.stage]]`` items)."""
    if not isinstance(table, dict):
        raise ConfigError("[curriculum] must be a table of [[curriculum.stage]] tables")
    for key in table:
        if key != "stage":
            raise ConfigError(f"unknown key {key!r} in [curriculum]; valid: stage")
    stages = table.get("stage", [])
    if not isinstance(stages, list):
        raise ConfigError(
            "curriculum.stage must be an array of tables: [[curriculum.stage]] per stage"
        )
    return tuple(_stage(k + 1, k == len(stages) - 1, t) for k, t in enumerate(stages))


def check_curriculum(config) -> None:
    """Each stage's params of ``config`` (a ``fasttrain.config.resolve.Config``) against the chosen
    game: known, valid, shape-preserving and different from the stage before; one line naming
    the stage otherwise."""
    game = config.game.name
    spec = games.get(game)
    base = config.params
    valid = [f.name for f in dataclasses.fields(spec.params_cls)]
    previous = None
    for k, stage in enumerate(config.curriculum, start=1):
        where = f"curriculum stage {k}"
        for name in stage.params:
            if name not in valid:
                raise ConfigError(
                    f"{where}: unknown {game} parameter {name!r}; valid: {', '.join(valid)}"
                )
        try:
            params = stage_params(spec, base, stage)
        except (TypeError, ValueError) as exc:
            hint = ""
            for capacity, param in CAPACITIES.get(game, {}).items():
                asked, room = stage.params.get(param), getattr(base, capacity)
                if isinstance(asked, int) and asked > room:
                    hint = (
                        f" (game.{game}.{capacity} = {room} is set; left unset it is sized for "
                        f"the largest {param})"
                    )
            raise ConfigError(f"{where}: {str(exc).splitlines()[0]}{hint}") from None
        culprits = shape_params(spec, base, params)
        if culprits:
            names = ", ".join(repr(n) for n in culprits)
            raise ConfigError(
                f"{where}: game {game!r} parameter {names} sets buffer shapes and cannot change "
                f"between stages; set it in [game.{game}] for the whole run"
            )
        if previous is not None and params == previous:
            raise ConfigError(
                f"{where} changes nothing from stage {k - 1}; each stage must change a game param"
            )
        previous = params


@dataclass(frozen=True)
class Promotion:
    """A move to ``stage`` (0-based) after ``global_step``, for the log line."""

    stage: int
    num_stages: int
    global_step: int
    metric: str
    value: float
    threshold: float

    def __str__(self):
        return (
            f"curriculum: stage {self.stage + 1}/{self.num_stages} at step "
            f"{self.global_step:,} ({self.metric} {self.value:.4g} >= {self.threshold:.4g})"
        )


class Curriculum:
    """Applies the current stage's params to ``env`` and decides promotions.

    ``base``: the game params the stages override (default: ``env.params`` as it is now, i.e.
    before any stage was applied); ``start_step``: the global step stage 0 starts at. Call
    ``apply()`` (or ``load_state_dict``) once before the first step, then ``update(stats,
    global_step)`` after every iteration with that iteration's ``env.stats()``.
    """

    def __init__(self, stages, env, base=None, start_step: int = 0):
        if not stages:
            raise ValueError("a curriculum needs at least one stage")
        self.stages = tuple(stages)
        self.env = env
        self.base = env.params if base is None else base
        self.stage = 0  # index into stages
        self.stage_start = start_step  # global step at which the current stage began
        self.batches: deque[tuple[float, int]] = deque()  # (mean, episodes) per iteration

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def params(self, stage: int | None = None):
        """The game params of ``stage`` (default: the current one)."""
        stage = self.stage if stage is None else stage
        return stage_params(self.env.spec, self.base, self.stages[stage])

    def apply(self) -> None:
        """Set the current stage's params on the env (between steps)."""
        self.env.set_params(**vars(self.params()))

    def window(self) -> tuple[float, int]:
        """Mean of the promote metric over the window and the episodes it covers (NaN, 0
        when the stage has seen no episode yet)."""
        count = sum(n for _, n in self.batches)
        if count == 0:
            return float("nan"), 0
        return sum(mean * n for mean, n in self.batches) / count, count

    def update(self, stats: dict, global_step: int) -> Promotion | None:
        """Feed one iteration's ``env.stats()``; promote (and apply) when the rule holds."""
        if self.stage == self.num_stages - 1:
            return None  # the last stage: nothing to promote to, nothing to track
        stage = self.stages[self.stage]
        if stats.get("episodes", 0) > 0:
            mean = float(stats[PROMOTE_METRICS[stage.promote_metric]])
            self.batches.append((mean, stats["episodes"]))
            # drop the oldest batches the window can do without
            count = sum(n for _, n in self.batches)
            while count - self.batches[0][1] >= stage.promote_episodes:
                count -= self.batches.popleft()[1]
        mean, count = self.window()
        if (
            global_step - self.stage_start < stage.min_steps
            or count < stage.promote_episodes
            or not mean >= stage.promote_at
        ):
            return None
        self.stage += 1
        self.stage_start = global_step
        self.batches.clear()
        self.apply()
        return Promotion(
            self.stage, self.num_stages, global_step, stage.promote_metric, mean, stage.promote_at
        )

    def state_dict(self) -> dict:
        """What a checkpoint needs to continue the curriculum bit for bit."""
        return {
            "stage": self.stage,
            "num_stages": self.num_stages,
            "stage_start": self.stage_start,
            "batches": [list(batch) for batch in self.batches],
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` output and apply that stage's params; a stage this
        curriculum does not have raises ConfigError in one line, changing nothing."""
        stage = int(state["stage"])
        if not 0 <= stage < self.num_stages:
            raise ConfigError(
                f"checkpoint is in curriculum stage {stage + 1} of {state.get('num_stages')}; "
                f"this run's curriculum has {self.num_stages} stage(s)"
            )
        self.stage = stage
        self.stage_start = int(state["stage_start"])
        self.batches = deque((float(mean), int(n)) for mean, n in state["batches"])
        self.apply()

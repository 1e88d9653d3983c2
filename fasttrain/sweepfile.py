"""A sweep file (``fasttrain sweep --config FILE``), read and checked before any trial.

A sweep file is a config file (any keys of config.toml: the settings every trial starts from)
plus a ``[sweep]`` table; ``examples/sweep_cartpole.toml`` is one. ``[sweep.params]`` maps dotted
config keys, as ``--set`` takes them, to ranges ``{low, high}`` (optional ``log``, ``step``;
ints when both ends are ints) or to ``{choices = [...]}``. Everything is checked before the
first trial; a trial whose sampled values make an invalid config fails with its one-line reason.
A sweep's Optuna study stores ``Sweep.record`` when made; a continued one is checked against it
and against the distributions its trials drew from (``study_difference``) before any trial.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from fasttrain.config import resolve as cfg
from fasttrain.config.file import to_toml
from fasttrain.errors import ConfigError
from fasttrain.learners import LEARNERS
from fasttrain.targets import COLUMNS

OBJECTIVES = {"time_to_target": "minimize", "final_return": "maximize", "final_score": "maximize"}
PRUNERS = ("median", "none")
PARAM_KEYS = ("low", "high", "log", "step", "choices")


@dataclass(frozen=True)
class SweepSettings:
    """The ``[sweep]`` table, less its params."""

    trials: int = 20
    """finished trials the study should hold (a sweep into the same --out continues to this)"""
    objective: str = "time_to_target"
    """time_to_target (minimised) | final_return | final_score (maximised)"""
    target: float | None = None
    """time_to_target: the mean return or score to reach"""
    target_metric: str = "return"
    """time_to_target: return | score, the mean episode metric watched"""
    budget_s: float = 0.0
    """training seconds per trial, where it stops (time_to_target needs one; 0: none)"""
    seeds: int = 1
    """runs per trial, seeds run.seed, run.seed + 1, ...; the trial's value is their median"""
    pruner: str = "median"
    """median | none: prune a trial behind the median of earlier ones at the same point"""
    seed: int = 0
    """seed of the TPE sampler (--seed)"""


@dataclass(frozen=True)
class Param:
    """One searched config key: a range ``low..high`` or a list of ``choices``."""

    key: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    def distribution(self):
        """The Optuna distribution this param is sampled from."""
        from optuna import distributions

        if self.choices:
            return distributions.CategoricalDistribution(self.choices)
        if isinstance(self.low, int) and isinstance(self.high, int):
            return distributions.IntDistribution(
                self.low, self.high, log=self.log, step=self.step or 1
            )
        return distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step)


@dataclass(frozen=True)
class Sweep:
    """A checked sweep: its settings, params and the config layers every trial starts from."""

    settings: SweepSettings
    params: tuple[Param, ...]
    layers: tuple  # raw (label, dict) config layers without [sweep], lowest precedence first
    base: cfg.Config = field(repr=False)

    def trial_config(self, values: dict, extra: dict | None = None) -> cfg.Config:
        """The config of a trial with sampled ``values`` (dotted key -> value) on top."""
        layer: dict = {}
        for key, value in values.items():
            cfg.put(layer, key.split("."), value, f"sweep.params {key!r}")
        return cfg.build([*self.layers, ("sweep trial", layer), ("sweep", extra or {})])

    def record(self) -> dict:
        """What a continued study must share, as the study stores it (JSON data: tuples read
        back as lists): the ``[sweep]`` settings but ``trials`` (the sampler's ``seed`` among
        them), each param's range or choices, and the base config's TOML."""
        settings = dataclasses.asdict(self.settings)
        del settings["trials"]
        params = {p.key: _fields(p) for p in self.params}
        data = {"sweep": settings, "params": params, "config": to_toml(self.base)}
        return json.loads(json.dumps(data))


def _fields(param: Param) -> dict:
    """A param as its sweep file gives it: ``{choices}`` or ``{low, high, log, step}``."""
    if param.choices:
        return {"choices": list(param.choices)}
    return {"low": param.low, "high": param.high, "log": param.log, "step": param.step}


def population_problem(spec: Sweep) -> str | None:
    """None where ``spec``'s trials can train as one population, else why not (one line): the
    base config must train as one, and every param be a setting members may vary (checked by
    building the trials of every param's first and last value)."""
    from fasttrain.learners.population import population_problem as learner_problem
    from fasttrain.learners.population import variants_problem

    problem = learner_problem(spec.base)
    if problem:
        return f"sweep --population: {problem}"
    ends = [{}, {}]
    for p in spec.params:
        first, last = (p.choices[0], p.choices[-1]) if p.choices else (p.low, p.high)
        ends[0][p.key], ends[1][p.key] = first, last
    try:
        configs = [spec.trial_config(values) for values in ends]
    except ConfigError as exc:
        return f"sweep --population: {str(exc).splitlines()[0]}"
    problem = variants_problem(configs[0], configs[1:])
    return None if problem is None else f"sweep --population: {problem}"


def study_difference(sweep: Sweep, study) -> str | None:
    """Why an Optuna ``study`` is not ``sweep``'s, in a few words (None where it is): the record
    it was made with (``Sweep.record``), its direction, and the distribution each of its
    trials sampled each param from."""
    problem = record_difference(study.user_attrs.get("sweep"), sweep.record())
    if problem:
        return problem
    theirs = " and ".join(d.name.lower() for d in study.directions)
    if theirs != OBJECTIVES[sweep.settings.objective]:
        return f"it is to {theirs} (this sweep: {OBJECTIVES[sweep.settings.objective]})"
    distributions = {p.key: p.distribution() for p in sweep.params}
    for trial in study.get_trials(deepcopy=False):
        for key, distribution in trial.distributions.items():
            if distributions.get(key) != distribution:
                mine = distributions.get(key, "nothing")
                return (
                    f"its trial {trial.number} drew {key} from {distribution} (this sweep: {mine})"
                )
    return None


def record_difference(stored, record: dict) -> str | None:
    """What differs between the record a study holds (``stored``, as read back) and this
    sweep's (``Sweep.record``), in a few words naming it; None where they agree."""
    if not isinstance(stored, dict) or any(
        not isinstance(stored.get(k), type(v)) for k, v in record.items()
    ):
        return "it records no fasttrain sweep settings, params and sampler seed"
    for part, where in (
        ("sweep", "its sweep.{} is"),
        ("params", "its sweep.params {!r} is"),
        ("config", "its base config has {} ="),
    ):
        theirs, mine = _keys(stored[part]), _keys(record[part])
        if theirs is None:
            return "its base config is not TOML"
        for key in sorted({*theirs, *mine}):
            if theirs.get(key) != mine.get(key):
                shown = (_shown(d.get(key)) for d in (theirs, mine))
                return f"{where.format(key)} {next(shown)} (this sweep: {next(shown)})"
    return None


def _keys(part) -> dict | None:
    """A recorded part as ``key -> value``: params as they are, the config's TOML flattened to
    ``"section.key" -> value`` (None where it does not read as TOML)."""
    if isinstance(part, dict):
        return part
    try:
        return _flat(cfg.tomllib.loads(part))
    except (cfg.tomllib.TOMLDecodeError, RecursionError):  # a hand-edited study.db
        return None


def _shown(value) -> str:
    """A recorded value as a sweep file writes it, cut at 80 characters (``nothing`` where
    there is none)."""
    if value is None:
        return "nothing"
    if isinstance(value, dict):  # a param: the keys it sets
        kept = [f"{k} = {_shown(v)}" for k, v in value.items() if v is not None and v is not False]
        text = "{ " + ", ".join(kept) + " }"
    else:
        text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _flat(table: dict, prefix: str = "") -> dict:
    """A TOML table as ``"section.key" -> value`` (arrays of tables stay whole values)."""
    flat = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load(path, sets=(), trials: int | None = None, seed: int | None = None) -> Sweep:
    """Read and check a sweep file (``--set`` items may set ``sweep.*`` keys too)."""
    return from_layers(cfg.user_layers(path, sets), trials=trials, seed=seed)


def from_layers(layers, trials: int | None = None, seed: int | None = None) -> Sweep:
    """A checked Sweep from raw ``(label, dict)`` config layers holding a ``[sweep]`` table."""
    table: dict = {}
    plain = []
    for label, data in layers:
        data = dict(data)
        part = data.pop("sweep", None)
        if part is not None:
            if not isinstance(part, dict):
                raise ConfigError(f"{label}: [sweep] must be a table")
            table = cfg.merge(table, part)
        plain.append((label, data))
    if not table:
        raise ConfigError(
            "no [sweep] table: a sweep file is a config plus [sweep] (trials, objective, ...) "
            "and [sweep.params]; see examples/sweep_cartpole.toml"
        )
    if trials is not None:
        table["trials"] = trials
    if seed is not None:
        table["seed"] = seed
    raw_params = table.pop("params", None)
    settings = _settings(table)
    base = cfg.build(plain)
    params = _params(raw_params, base)
    if not {"run.algo", "game.name"} & {p.key for p in params}:  # one learner runs every trial
        cfg.check_sections_apply(base)
    return Sweep(settings, params, tuple(plain), base)


def _settings(table: dict) -> SweepSettings:
    fields = {f.name: f for f in dataclasses.fields(SweepSettings)}
    valid = {"objective": tuple(OBJECTIVES), "target_metric": tuple(COLUMNS), "pruner": PRUNERS}
    values = {}
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(
                f"unknown key {key!r} in [sweep]; valid: {', '.join([*fields, 'params'])}"
            )
        default = 0.0 if key == "target" else fields[key].default
        values[key] = cfg.check_value(f"sweep.{key}", default, value, valid.get(key))
    settings = SweepSettings(**values)
    for key in ("trials", "seeds"):
        if getattr(settings, key) < 1:
            raise ConfigError(f"sweep.{key} must be >= 1, got {getattr(settings, key)}")
    if not 0 <= settings.seed < 2**32:
        raise ConfigError(f"sweep.seed must be in [0, 2**32), got {settings.seed}")
    if settings.budget_s < 0:
        raise ConfigError(f"sweep.budget_s must be >= 0, got {settings.budget_s}")
    if settings.objective == "time_to_target":
        if settings.target is None:
            raise ConfigError("sweep.objective = 'time_to_target' needs sweep.target (a mean)")
        if settings.budget_s <= 0:
            raise ConfigError(
                "sweep.objective = 'time_to_target' needs sweep.budget_s > 0 (training seconds "
                "per trial)"
            )
    else:
        for key in ("target", "target_metric"):
            if key in table:
                raise ConfigError(
                    f"sweep.{key} is read by objective 'time_to_target' only, not "
                    f"{settings.objective!r}; drop it"
                )
    return settings


def _params(table, base: cfg.Config) -> tuple[Param, ...]:
    if not isinstance(table, dict) or not table:
        raise ConfigError(
            '[sweep.params] needs at least one key, e.g. "ppo.learning_rate" = '
            "{ low = 1e-4, high = 1e-2, log = true }"
        )
    params = tuple(_param(key, spec) for key, spec in table.items())
    swept = set(table)
    for param in params:
        values = param.choices or (param.low, param.high)
        for value in values:  # the key exists and takes values of this type
            layer = cfg.put({}, param.key.split("."), value, f"sweep.params {param.key!r}")
            try:
                cfg.check_layer(layer, "[sweep.params]")
            except ConfigError as exc:
                raise ConfigError(f"sweep.params {param.key!r}: {exc}") from None
        _check_used(param.key, base, swept)
    return params


def _param(key: str, spec) -> Param:
    where = f"sweep.params {key!r}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table {{ low, high }} or {{ choices = [...] }}")
    unknown = set(spec) - set(PARAM_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown key {sorted(unknown)[0]!r} in {where}; valid: low, high, log, step, choices"
        )
    if "choices" in spec:
        choices = spec["choices"]
        if set(spec) != {"choices"}:
            raise ConfigError(f"{where}: choices goes alone (no low, high, log or step)")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices must be a non-empty list")
        if not all(isinstance(c, (bool, int, float, str)) for c in choices):
            raise ConfigError(f"{where}: choices must be numbers, booleans or strings")
        return Param(key, choices=tuple(choices))
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where} needs low and high, or choices")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")
    for name, value in (("low", low), ("high", high), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log must be true or false, got {log!r}")
    if not low < high:
        raise ConfigError(f"{where}: low must be < high, got low = {low}, high = {high}")
    if log and low <= 0:
        raise ConfigError(f"{where}: log = true needs low > 0, got {low}")
    if step is not None:
        if log:
            raise ConfigError(f"{where}: step and log = true do not go together")
        if step <= 0:
            raise ConfigError(f"{where}: step must be > 0, got {step}")
        if isinstance(low, int) and isinstance(high, int) and not isinstance(step, int):
            raise ConfigError(f"{where}: an int range takes an int step, got {step}")
    return Param(key, low=low, high=high, log=log, step=step)


def _check_used(key: str, base: cfg.Config, swept: set) -> None:
    """A key of a learner or game these runs do not use changes nothing: refuse it."""
    parts = key.split(".")
    learner = parts[2] if parts[0] == "game" and len(parts) > 3 else parts[0]
    if learner in LEARNERS and learner != base.run.algo and "run.algo" not in swept:
        raise ConfigError(f"sweep.params {key!r} changes nothing: run.algo is {base.run.algo!r}")
    if parts[0] == "game" and len(parts) > 2 and parts[1] != base.game.name:
        if "game.name" not in swept:
            raise ConfigError(
                f"sweep.params {key!r} changes nothing: game.name is {base.game.name!r}"
            )

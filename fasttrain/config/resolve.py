"""Run configuration: layers of settings checked, resolved once and validated.

Sections: ``[run]``, ``[game]``, ``[game.<name>]`` (the game's params), one section per learner
(``[ppo]``, ``[dqn]``: each learner's config dataclass, see ``fasttrain.learners``), ``[model]``,
``[log]``, per-game learner settings in ``[game.<name>.<learner>]``, and the curriculum's
``[[curriculum.stage]]`` tables (``fasttrain.config.curriculum.Stage``; a layer that has them
replaces the whole list of the layers below). The sections' dataclasses, whose defaults equal
``config.toml``, are in ``fasttrain.config.sections``; reading files and ``--set`` in
``fasttrain.config.read``. Checking a layer imports no torch; validating a whole config does.

Precedence, lowest first: built-in defaults < per-game tuned values (``fasttrain.config.presets``) <
the user's ``--config`` file < ``--set`` < command-line flags. ``build`` resolves the layers once
(``Layers``, the one resolver) into a frozen ``Config`` of the chosen game and learner, checked
before any work; every reader takes that. The TOML writer and the field docs are in
``fasttrain.config.file``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from fasttrain import games
from fasttrain.config.choices import check_counts
from fasttrain.config.curriculum import (
    CAPACITIES,
    capacities,
    check_curriculum,
    parse_stages,
    stage_params,
)
from fasttrain.config.presets import GAME_DEFAULTS, learner_of, preset, preset_source
from fasttrain.config.read import (  # the reading helpers, also this module's own names
    check_value,
    load_toml,
    merge,
    parse_set,
    put,
    tomllib,
    user_layers,
)
from fasttrain.config.sections import (  # also fasttrain.config.resolve's own names
    LEARNER_SECTIONS,
    SECTIONS,
    GameConfig,
    LogConfig,
    ModelConfig,
    RunConfig,
    choices,
)
from fasttrain.errors import ConfigError
from fasttrain.learners import LEARNERS

__all__ = [
    "GAME_DEFAULTS",
    "LEARNER_SECTIONS",
    "SECTIONS",
    "Config",
    "GameConfig",
    "LogConfig",
    "ModelConfig",
    "RunConfig",
    "ConfigError",
    "Layers",
    "build",
    "check_value",
    "choices",
    "defaults",
    "from_dict",
    "load",
    "load_toml",
    "merge",
    "parse_set",
    "put",
    "tomllib",
    "user_layers",
]


@dataclass(frozen=True)
class Layer:
    """One source of settings, already checked: only the keys it sets.

    ``sections``: section -> {key: value} for run, game, model, log and learner sections;
    ``games``: game -> {"params": {...}, learner: {...}} from its [game.<name>] tables.
    """

    label: str  # where the values came from: "--config FILE", "--set", "checkpoint", ...
    sections: dict
    games: dict
    curriculum: tuple | None = None  # its [[curriculum.stage]] tables; None: it sets none


# ------------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class Layers:
    """The checked layers of a run's settings, lowest precedence first, over the built-in
    defaults and the per-game presets: the one place settings are resolved.

    For a learner section (``ppo``, ``dqn``) or ``model`` on a game: the dataclass defaults <
    the game's presets < each layer in order, where inside one layer ``[game.<name>.<section>]``
    beats ``[<section>]``. For the game's params: its defaults < its preset < each layer's
    ``[game.<name>]``.
    """

    items: tuple = ()
    device: str = "cpu"
    """the device type the run will have (``fasttrain.device.device_type``)"""
    variant: str = "base"
    """the preset variant laid over each game's base preset (``run.preset`` resolved by
    ``fasttrain.device.preset_variant``: ``fp32``, ``cuda``)"""

    def __iter__(self):
        return iter(self.items)

    def resolve(self, section: str, game: str) -> tuple[dict, dict]:
        """The values set for learner section (or ``model``) ``section`` on ``game``, and
        where each came from."""
        values, sources = {}, {}

        def apply(table: dict, label: str):
            values.update(table)
            sources.update(dict.fromkeys(table, label))

        presets = preset(game, section, self.variant)
        values.update(presets)
        sources.update({k: preset_source(game, section, k, self.variant) for k in presets})
        for layer in self.items:
            apply(layer.sections.get(section, {}), layer.label)
            specific = layer.games.get(game, {}).get(section, {})
            apply(specific, f"{layer.label} [game.{game}.{section}]")
        return values, sources

    def learner(self, name: str, game: str):
        """The settings learner ``name`` uses on ``game``."""
        return LEARNERS[name].config(**self.resolve(name, game)[0])

    def model(self, game: str) -> ModelConfig:
        """The network ``game`` trains."""
        return ModelConfig(**self.resolve("model", game)[0])

    def params_sources(self, game: str) -> tuple[dict, dict]:
        """The params set for ``game`` (its preset, then each layer's [game.<name>]) and where
        each came from."""
        values = dict(preset(game, "params", self.variant))
        sources = {k: preset_source(game, "params", k, self.variant) for k in values}
        for layer in self.items:
            table = layer.games.get(game, {}).get("params", {})
            values.update(table)
            sources.update(dict.fromkeys(table, layer.label))
        return values, sources

    def params(self, game: str):
        """The params object of ``game``."""
        return games.get(game).make_params(**self.params_sources(game)[0])

    def section(self, name: str):
        """``[name]`` as the layers write it, with no preset: the fixed sections (run, game,
        log) as a run uses them, a learner's or the model's as the base of every game's."""
        merged: dict = {}
        for layer in self.items:
            merged.update(layer.sections.get(name, {}))
        return SECTIONS[name](**merged)

    def section_sources(self, name: str) -> dict:
        """Where each key a layer sets in ``[name]`` came from."""
        sources = {}
        for layer in self.items:
            sources.update(dict.fromkeys(layer.sections.get(name, {}), layer.label))
        return sources

    @property
    def curriculum(self) -> tuple:
        """The stages of the highest layer that has any (a layer's list replaces those below)."""
        stages = ()
        for layer in self.items:
            if layer.curriculum is not None:
                stages = layer.curriculum
        return stages

    def curriculum_source(self) -> str | None:
        labels = [layer.label for layer in self.items if layer.curriculum is not None]
        return labels[-1] if labels else None


@dataclass(frozen=True)
class Config:
    """A run's settings, resolved once for its game and learner, frozen: what every reader
    takes. Build it with ``build``, ``load`` or ``from_dict``; ``defaults()`` is the built-in one.
    """

    run: RunConfig
    game: GameConfig
    params: object
    """the chosen game's params (a frozen dataclass of the game's)"""
    learner: object
    """the settings of ``run.algo`` on the chosen game (its config dataclass)"""
    model: ModelConfig
    """the chosen game's network"""
    log: LogConfig
    curriculum: tuple = ()
    """the chosen game's curriculum stages (``config.curriculum.Stage``), empty for none"""
    sources: Mapping = field(default_factory=dict, compare=False, repr=False)
    """``"ppo.learning_rate"`` -> where the value came from (``"snake preset"``, ``"--set"``,
    ...), for every setting a preset, a layer or ``with_learner`` set"""
    layers: Layers = field(default_factory=Layers, compare=False, repr=False)
    """what the config was built from: the other games' settings, for ``to_toml``"""

    def stage_params(self, stage: int):
        """The chosen game's params in curriculum stage ``stage`` (0-based)."""
        return stage_params(games.get(self.game.name), self.params, self.curriculum[stage])

    def with_learner(self, source: str, **values) -> Config:
        """This config with learner settings replaced after resolution (``--steps`` and
        ``--num-envs``), checked again; ``source`` names where they came from."""
        if not values:
            return self
        learner = dataclasses.replace(self.learner, **values)
        sources = {**self.sources, **{f"{self.run.algo}.{k}": source for k in values}}
        config = dataclasses.replace(self, learner=learner, sources=sources)
        validate(config)
        return config

    def overrides(self) -> list[str]:
        """``key=value (source)`` for each setting of this run that a preset, a layer or the
        command line set: those that differ from the built-in default, and every one the user
        gave on the command line (``--set``, flags) even where it equals the default."""
        algo, game = self.run.algo, self.game.name
        sections = [
            (algo, self.learner, LEARNERS[algo].config()),
            ("model", self.model, ModelConfig()),
            ("run", self.run, RunConfig()),
            ("log", self.log, LogConfig()),
            (f"game.{game}", self.params, type(self.params)()),
        ]
        out = []
        for prefix, values, defaults in sections:
            for key, value in dataclasses.asdict(values).items():
                source = self.sources.get(f"{prefix}.{key}")
                typed = (source or "").startswith(COMMAND_LINE)
                if value != getattr(defaults, key) or (source is not None and typed):
                    out.append(f"{prefix}.{key}={value!r} ({source})")
        if self.curriculum:
            source = self.layers.curriculum_source()
            out.append(f"curriculum={len(self.curriculum)} stages ({source})")
        return out


# the labels of what a user typed for this run (flags and --set), listed even when equal to a
# default
COMMAND_LINE = ("--set", "command line")


def defaults() -> Config:
    """The built-in config: every default and preset, no layer."""
    return build([])


def build(layers) -> Config:
    """A validated Config from layers, lowest precedence first: ``(label, dict)`` or Layer."""
    layers = Layers(
        tuple(
            layer if isinstance(layer, Layer) else check_layer(layer[1], layer[0])
            for layer in layers
        )
    )
    run, game, log = layers.section("run"), layers.section("game"), layers.section("log")
    if game.name not in games.names():
        raise ConfigError(f"unknown game {game.name!r}; valid: {', '.join(games.names())}")
    for layer in layers:
        for name, entry in layer.games.items():
            _check_params(name, entry["params"])
    from fasttrain.device import device_type, preset_variant  # torch: once the layers are good

    device = device_type(run.device)
    variant, why = preset_variant(run.preset, device)
    layers = dataclasses.replace(layers, device=device, variant=variant)
    run_sources = layers.section_sources("run")
    if run.preset == "auto":  # recorded: a resume and a replay use the same variant
        run = dataclasses.replace(run, preset=variant)
        run_sources["preset"] = f"auto: {why}"
    own = learner_of(game.name)  # the game's own learner, where no layer names one
    if "algo" not in run_sources and own != run.algo:  # a source only where it changes one
        run = dataclasses.replace(run, algo=own)
        run_sources["algo"] = f"{game.name} preset"
    params_values, params_sources = layers.params_sources(game.name)
    for key, size in capacities(game.name, params_values, layers.curriculum).items():
        params_values[key] = size
        params_sources[key] = f"largest {CAPACITIES[game.name][key]}"
    learner_values, learner_sources = layers.resolve(run.algo, game.name)
    model_values, model_sources = layers.resolve("model", game.name)
    sources = {
        **{f"run.{k}": v for k, v in run_sources.items()},
        **{f"game.{k}": v for k, v in layers.section_sources("game").items()},
        **{f"log.{k}": v for k, v in layers.section_sources("log").items()},
        **{f"game.{game.name}.{k}": v for k, v in params_sources.items()},
        **{f"{run.algo}.{k}": v for k, v in learner_sources.items()},
        **{f"model.{k}": v for k, v in model_sources.items()},
    }
    config = Config(
        run=run,
        game=game,
        params=_check_params(game.name, params_values),
        learner=LEARNERS[run.algo].config(**learner_values),
        model=ModelConfig(**model_values),
        log=log,
        curriculum=layers.curriculum,
        sources=sources,
        layers=layers,
    )
    validate(config)
    return config


# ------------------------------------------------------------------------------- loading


def _section_values(name: str, cls, table: dict) -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] must be a table")
    valid = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    section = name.split(".")[-1]
    for key, value in table.items():
        if key not in valid:
            raise ConfigError(f"unknown key {key!r} in [{name}]; valid: {', '.join(valid)}")
        default = valid[key].default
        out[key] = check_value(f"{name}.{key}", default, value, choices(section, key))
    return out


def _game_tables(table: dict) -> tuple[dict, dict]:
    """[game] keys, and per game {"params": {...}, learner: {...}} from [game.<name>] tables."""
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    per_game = {}
    for name, sub in table.items():
        if not isinstance(sub, dict):
            continue
        if name not in games.names():
            raise ConfigError(
                f"unknown game section [game.{name}]; valid: {', '.join(games.names())}"
            )
        entry = {"params": {}}
        for key, value in sub.items():
            if key in LEARNERS:
                entry[key] = _section_values(f"game.{name}.{key}", LEARNERS[key].config, value)
            elif key == "model":
                entry[key] = _section_values(f"game.{name}.model", ModelConfig, value)
            else:
                entry["params"][key] = value
        _check_params(name, entry["params"])
        per_game[name] = entry
    return plain, per_game


def _check_params(game: str, params: dict):
    try:
        return games.get(game).make_params(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[game.{game}]: {exc}") from None


def check_layer(data: dict, label: str = "config") -> Layer:
    """Check a parsed TOML document (or ``--set`` items) as one layer of settings."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a table of sections")
    curriculum = parse_stages(data["curriculum"]) if "curriculum" in data else None
    data = {k: v for k, v in data.items() if k != "curriculum"}
    unknown = set(data) - set(SECTIONS)
    if "sweep" in unknown:  # a sweep file: a config plus [sweep], read by fasttrain sweep
        raise ConfigError(
            f"{label}: [sweep] is read by `fasttrain sweep --config FILE`; drop the table to "
            "train once with these settings"
        )
    if unknown:
        raise ConfigError(
            f"unknown section [{sorted(unknown)[0]}]; valid: {', '.join(SECTIONS)}, curriculum"
        )
    sections, per_game = {}, {}
    for name, cls in SECTIONS.items():
        if name not in data:
            continue
        table = data[name]
        if name == "game":
            if not isinstance(table, dict):
                raise ConfigError("[game] must be a table")
            table, per_game = _game_tables(table)
        sections[name] = _section_values(name, cls, table)
    return Layer(label, sections, per_game, curriculum)


def from_dict(data: dict, label: str = "config") -> Config:
    """Build and validate a Config from one parsed TOML document."""
    return build([(label, data)])


def load(path: str | os.PathLike | None = None, sets=(), overrides: dict | None = None) -> Config:
    """Defaults < presets < the TOML file at ``path`` < ``--set`` items < ``overrides``."""
    layers = user_layers(path, sets)
    if overrides:
        layers.append(("overrides", overrides))
    return build(layers)


def validate(config: Config) -> None:
    """Check ranges and the consistency of sizes; raise ConfigError with one line.

    Each learner's settings are checked as they apply to the chosen game: presets and every
    layer folded in, since a value is only wrong where it is used.
    """
    game = config.game.name
    for name, learner in LEARNERS.items():  # every learner's settings as they apply here
        used = config.learner if name == config.run.algo else config.layers.learner(name, game)
        learner.validate(used, name)
    _check_run(config.run)
    if config.log.csv_every < 1:
        raise ConfigError(f"log.csv_every must be >= 1, got {config.log.csv_every}")
    spec = games.get(game)
    if config.run.action_repeat > 1 and spec.agent_game:
        raise ConfigError(
            f"run.action_repeat = {config.run.action_repeat} needs a single-agent game; "
            f"{game!r} has several agents per environment: use run.action_repeat = 1"
        )
    _check_model(config, spec)
    if config.log.interval_s <= 0:
        raise ConfigError("log.interval_s must be > 0")
    if config.log.replay_steps < 1:
        raise ConfigError(f"log.replay_steps must be >= 1, got {config.log.replay_steps}")
    check_curriculum(config)


def _check_run(run: RunConfig) -> None:
    """The ``[run]`` ranges: threads, seed, intervals, the distributed timeout."""
    if run.numba_threads < 0:
        raise ConfigError("run.numba_threads must be >= 0")
    check_counts(run, ("torch_threads",), "run", low=0)
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    if run.numba_threads > most:
        raise ConfigError(
            f"run.numba_threads = {run.numba_threads}: Numba has at most {most} threads "
            "here (NUMBA_NUM_THREADS, one per core); 0 takes one per core"
        )
    if not 0 <= run.seed < 2**64:
        raise ConfigError(f"run.seed must be in [0, 2**64), got {run.seed}")
    for key in ("checkpoint_interval", "nan_patience"):
        if getattr(run, key) < 1:
            raise ConfigError(f"run.{key} must be >= 1, got {getattr(run, key)}")
    check_counts(run, ("action_repeat",), "run")
    if run.dist_timeout_s <= 0:
        raise ConfigError(f"run.dist_timeout_s must be > 0, got {run.dist_timeout_s}")


def _check_model(config: Config, spec) -> None:
    """The network against the game's observations, the host's memory and the learner."""
    model, algo = config.model, config.run.algo
    obs_shape = tuple(spec.obs_shape(config.params))
    if model.kind == "cnn" and len(obs_shape) != 3:
        raise ConfigError(
            f"model.kind = 'cnn' needs (C, H, W) observations; {config.game.name}'s are "
            f"{obs_shape}: use model.kind = 'mlp' or 'auto'"
        )
    if model.hidden < 1 or model.layers < 1 or model.channels < 1:
        raise ConfigError("model.hidden, model.layers and model.channels must be >= 1")
    check_counts(model, ("layers",), "model")
    if model.core_size < 1:
        raise ConfigError(f"model.core_size must be >= 1, got {model.core_size}")
    import torch  # counting the network's bytes builds it on the meta device

    from fasttrain.device import check_memory
    from fasttrain.models import training_nbytes

    check_memory(  # weights are made on the host first, whatever the device
        training_nbytes(obs_shape, model, "cpu", spec.obs_categories),
        f"training the model (model.hidden = {model.hidden})",
        torch.device("cpu"),
        fix="lower model.hidden or model.layers",
    )
    learner = LEARNERS[algo]
    if model.core != "none":
        if learner.check_model is None:
            recurrent = [n for n, x in LEARNERS.items() if x.check_model is not None]
            raise ConfigError(
                f"model.core = {model.core!r} needs a learner with recurrent policies "
                f"({', '.join(recurrent)}), not run.algo = {algo!r}; set model.core = 'none'"
            )
        learner.check_model(config.learner, model, algo)


# ------------------------------------------------------------------------------- no silent no-ops


def check_resume(saved: Config, config: Config) -> None:
    """Refuse, in one line naming them, settings a resumed run changes but cannot apply: its
    learner's ``fixed`` ones (the checkpoint's optimizer state, networks and buffers are built
    for them). Every other setting takes effect from the resumed iteration on."""
    fixed = LEARNERS[config.run.algo].fixed
    algo = config.run.algo
    changed = [
        k for k in fixed if getattr(saved.learner, k, None) != getattr(config.learner, k, None)
    ]
    if changed:
        was = ", ".join(f"{algo}.{k} = {getattr(saved.learner, k)!r}" for k in changed)
        now = ", ".join(repr(getattr(config.learner, k)) for k in changed)
        raise ConfigError(
            f"checkpoint was written with {was}; resume it with the same (this run has {now}, "
            "which --resume cannot apply: the checkpoint's optimizer state, networks and "
            "buffers are built for it)"
        )


def check_sections_apply(config: Config) -> None:
    """Refuse, in one line, settings of a learner that does not run: any ``--set`` into its
    section (``[L]`` or ``[game.<game>.L]``), and a value a ``--config`` file gives it that is
    neither its default nor the game's preset (a file may hold every learner's section, as
    config.toml and a run's config.toml do). Other layers (a resumed checkpoint's config,
    presets) are not the user's to refuse."""
    algo = config.run.algo
    for layer in config.layers:
        user_file = layer.label.startswith("--config ")
        if layer.label != "--set" and not user_file:
            continue
        for name, section, key, value in _other_learners_settings(config, layer, user_file):
            what = f"--set {section}.{key}"
            if user_file:
                what = f"{layer.label}: [{section}] {key} = {value!r} is never read"
            raise ConfigError(
                f"{what}: this run's learner is {algo} ({_algo_source(config)}), which reads "
                f"[{algo}], not [{name}]; pass --algo {name} to train with {name}"
            )


def _other_learners_settings(config: Config, layer: Layer, user_file: bool):
    """``(learner, section, key, value)`` of each setting ``layer`` gives a learner other than
    the run's on its game; in a file, only values that are neither the learner's default nor
    the game's preset."""
    game = config.game.name
    baseline = Layers((), config.layers.device, config.layers.variant)
    for name in LEARNERS:
        if name == config.run.algo:
            continue
        usual = (
            dataclasses.asdict(baseline.learner(name, game)),
            dataclasses.asdict(LEARNERS[name].config()),
        )
        tables = {name: layer.sections.get(name, {})}
        tables[f"game.{game}.{name}"] = layer.games.get(game, {}).get(name, {})
        for section, table in tables.items():
            for key, value in table.items():
                if not user_file or value not in (usual[0][key], usual[1][key]):
                    yield name, section, key, value


def _algo_source(config: Config) -> str:
    """Where the run's learner came from: ``--algo``, a layer, the game's preset, or the
    default."""
    source = config.sources.get("run.algo")
    if source is None:
        return "the default"
    return "--algo" if source == "command line" else source

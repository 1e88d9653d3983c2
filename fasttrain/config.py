"""Run configuration: frozen dataclasses whose defaults equal ``config.toml``.

Sections: ``[run]``, ``[game]``, ``[game.<name>]`` (the game's params), one section per learner
(``[ppo]``, ``[dqn]``: each learner's config dataclass, see ``fasttrain.learners``), ``[model]``,
``[log]``, per-game learner settings in ``[game.<name>.<learner>]``, and the curriculum's
``[[curriculum.stage]]`` tables (``fasttrain.curriculum.Stage``; a layer that has them replaces
the whole list of the layers below). Every field's docstring is its documentation, its comment
in config.toml and its ``--set`` help.

Precedence, lowest first: built-in defaults < per-game tuned values (``fasttrain.presets``) <
the user's ``--config`` file < ``--set`` < command-line flags. ``build`` resolves the layers once
(``Layers``, the one resolver) into a frozen ``Config`` of the chosen game and learner, checked
before any work; every reader takes that. The TOML writer and the field docs are in
``fasttrain.configfile``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from fasttrain import games
from fasttrain.curriculum import CAPACITIES, PROMOTE_METRICS, Stage, capacities, stage_params
from fasttrain.dashboards import WANDB_MODES
from fasttrain.device import AMP_MODES, COMPILE_MODES, DEVICES, device_type
from fasttrain.distributed import BACKENDS as DIST_BACKENDS
from fasttrain.errors import ConfigError, reason
from fasttrain.kernels.env import shape_params
from fasttrain.learners import LEARNERS
from fasttrain.learners.base import check_memory
from fasttrain.models import CORES, MODEL_KINDS, training_nbytes
from fasttrain.presets import GAME_ALGOS, GAME_DEFAULTS, preset, preset_source
from fasttrain.rundir import file_kind

__all__ = [
    "GAME_DEFAULTS",
    "Config",
    "ConfigError",
    "Layers",
    "build",
    "defaults",
    "from_dict",
    "load",
]


@dataclass(frozen=True)
class RunConfig:
    algo: str = "ppo"
    """learning algorithm (see fasttrain.learners.LEARNERS): ppo | dqn"""
    seed: int = 0
    """seed of the environments, the network and the sampling"""
    device: str = "auto"
    """auto | cpu | cuda: where environments and learner run (auto: cuda when present)"""
    amp: str = "auto"
    """auto | off | bf16 | fp16: mixed precision of the networks (auto: bf16 where the CPU or GPU
    computes it natively, on a CPU for networks 128 or more wide; off elsewhere; fp16 uses a
    GradScaler, CUDA only)"""
    compile: str = "auto"
    """auto | off | default | reduce-overhead | max-autotune: torch.compile the rollout forward
    pass and the whole update step (loss, backward, optimizer); auto: default for feed-forward
    PPO runs of 2M steps or more with networks at most 256 wide, on a CPU with a C++ compiler;
    off elsewhere; where compiling fails it warns once and runs eagerly"""
    torch_threads: int = 0
    """torch intra-op threads (0: one per core; one for a small network stepping few rows, under
    500k multiply-adds per rollout step, as CartPole's defaults)"""
    numba_threads: int = 0
    """Numba threads for the environments (0: one per core; one where torch_threads's 0 means
    one)"""
    checkpoint_interval: int = 100
    """write checkpoint.pt every this many iterations (and always at the end, on Ctrl-C and on
    SIGTERM)"""
    nan_patience: int = 20
    """stop after this many optimizer updates in a row were skipped for a non-finite loss or
    gradient (the last good checkpoint is kept)"""
    dist_backend: str = "auto"
    """auto | gloo | nccl: torch.distributed backend of a data-parallel run under torchrun
    (auto: nccl on cuda, gloo on the CPU)"""
    dist_timeout_s: float = 120.0
    """a data-parallel run's collectives fail after this many seconds without every rank,
    instead of hanging"""
    action_repeat: int = 1
    """play each action this many game steps inside one step launch, summing the rewards and
    stopping at the episode's end (Atari's frame skip; single-agent games); steps, SPS and
    total_timesteps count learner steps, each up to this many game steps"""


@dataclass(frozen=True)
class GameConfig:
    name: str = "snake"
    """game to train on (see `fasttrain games`)"""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "auto"
    """auto | mlp | cnn (auto: cnn for (C, H, W) observations on cuda, mlp otherwise)"""
    hidden: int = 128
    """width of the hidden layer(s)"""
    layers: int = 2
    """hidden layers of the mlp; 3x3 convolutions of the cnn"""
    channels: int = 16
    """channels of each cnn convolution"""
    activation: str = "tanh"
    """tanh | relu: mlp activation"""
    core: str = "none"
    """none | lstm | gru: a recurrent core between the torso and the heads (PPO only; sequences
    of ppo.bptt_horizon steps in the update)"""
    core_size: int = 128
    """width of the recurrent core's state (h; an LSTM also keeps c of this width)"""


@dataclass(frozen=True)
class LogConfig:
    interval_s: float = 5.0
    """seconds between log lines on the terminal"""
    csv_every: int = 1
    """write a metrics.csv row every this many iterations (rows do not depend on timing)"""
    progress: bool = True
    """show a progress bar when stdout is a terminal"""
    tensorboard: bool = False
    """also write the metrics.csv rows as TensorBoard scalars in RUN_DIR/tensorboard (extra
    tensorboard)"""
    wandb: str = "off"
    """off | offline | online: also log the metrics.csv rows to Weights & Biases (extra wandb;
    offline writes RUN_DIR/wandb for `wandb sync`)"""
    wandb_project: str = "fasttrain"
    """W&B project"""
    wandb_name: str = ""
    """W&B run name ("": the run directory's name)"""
    curves: bool = True
    """write RUN_DIR/curves.png (return and score over steps) at the end, when matplotlib is
    installed (extra plot)"""
    replay: bool = False
    """write RUN_DIR/replay.gif of the final policy playing one environment at the end (extra
    media)"""
    replay_steps: int = 300
    """steps in replay.gif"""
    wide: bool = False
    """print every loss and where the time went on each log line (fasttrain run --verbose),
    not the line that fits 120 columns"""


FIXED_SECTIONS = {"run": RunConfig, "game": GameConfig, "model": ModelConfig, "log": LogConfig}


class _Sections(Mapping):
    """Section name -> dataclass, in file order; learner sections follow ``LEARNERS`` live."""

    def _all(self) -> dict:
        learners = {name: learner.config for name, learner in LEARNERS.items()}
        return {
            "run": RunConfig,
            "game": GameConfig,
            **learners,
            "model": ModelConfig,
            "log": LogConfig,
        }

    def __getitem__(self, name):
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


SECTIONS = _Sections()
LEARNER_SECTIONS = LEARNERS.keys()  # may be overridden per game in [game.<name>.<learner>]
CHOICES = {
    ("run", "device"): DEVICES,
    ("run", "amp"): AMP_MODES,
    ("run", "compile"): COMPILE_MODES,
    ("run", "dist_backend"): DIST_BACKENDS,
    ("model", "kind"): MODEL_KINDS,
    ("model", "activation"): ("tanh", "relu"),
    ("model", "core"): CORES,
    ("log", "wandb"): WANDB_MODES,
}


def choices(section: str, key: str):
    """The valid values of ``section.key``, or None when any value of its type goes: a
    learner's sections take the choices its registration declares."""
    if (section, key) == ("run", "algo"):
        return tuple(LEARNERS)
    if section in LEARNERS:
        return LEARNERS[section].choices.get(key)
    return CHOICES.get((section, key))


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
    """the device type the run will have (``fasttrain.device.device_type``): a GPU preset
    applies on cuda"""

    def __iter__(self):
        return iter(self.items)

    def resolve(self, section: str, game: str) -> tuple[dict, dict]:
        """The values set for learner section (or ``model``) ``section`` on ``game``, and
        where each came from."""
        values, sources = {}, {}

        def apply(table: dict, label: str):
            values.update(table)
            sources.update(dict.fromkeys(table, label))

        presets = preset(game, section, self.device)
        values.update(presets)
        sources.update({k: preset_source(game, section, k, self.device) for k in presets})
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
        values = dict(preset(game, "params", self.device))
        sources = {k: preset_source(game, "params", k, self.device) for k in values}
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
    """the chosen game's curriculum stages (``fasttrain.curriculum.Stage``), empty for none"""
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
    run = layers.section("run")
    layers = dataclasses.replace(layers, device=device_type(run.device))
    game, log = layers.section("game"), layers.section("log")
    if game.name not in games.names():
        raise ConfigError(f"unknown game {game.name!r}; valid: {', '.join(games.names())}")
    for layer in layers:
        for name, entry in layer.games.items():
            _check_params(name, entry["params"])
    run_sources = layers.section_sources("run")
    if "algo" not in run_sources and game.name in GAME_ALGOS:  # the game's own learner
        run = dataclasses.replace(run, algo=GAME_ALGOS[game.name])
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


def check_value(where: str, default, value, valid=None):
    """``value`` checked against the type of ``default`` and the ``valid`` choices (an int
    where a float goes comes back as a float); a one-line ConfigError naming ``where`` if not."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"{where} must be {type(default).__name__}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if valid and value not in valid:
        raise ConfigError(f"{where} must be one of {', '.join(valid)}; got {value!r}")
    return value


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


def _curriculum(table) -> tuple:
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


def check_curriculum(config: Config) -> None:
    """Each stage's params against the chosen game: known, valid, shape-preserving and
    different from the stage before; one line naming the stage otherwise."""
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


def check_layer(data: dict, label: str = "config") -> Layer:
    """Check a parsed TOML document (or ``--set`` items) as one layer of settings."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a table of sections")
    curriculum = _curriculum(data["curriculum"]) if "curriculum" in data else None
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


def parse_set(assignments) -> dict:
    """``["ppo.learning_rate=3e-4", "game.snake.height=8"]`` as a nested dict."""
    out: dict = {}
    for item in assignments:
        if not item.isprintable():  # a newline would hide the text after it from the parser
            raise ConfigError(f"--set takes one line, section.key=value; got {item!r}")
        if "=" not in item:
            raise ConfigError(f"--set takes section.key=value, got {item!r}")
        path, raw = item.split("=", 1)
        keys = path.strip().split(".")
        if len(keys) < 2 or not all(keys):
            raise ConfigError(f"--set needs section.key=value, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()  # bare words such as cpu or snake
        put(out, keys, value, f"--set {path}")
    return out


def put(tree: dict, keys, value, where: str) -> dict:
    """Set ``tree[keys[0]][keys[1]]...`` to ``value``, making tables on the way."""
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: {key} is a value, not a section")
    node[keys[-1]] = value
    return tree


def merge(base: dict, extra: dict) -> dict:
    """Recursive dict merge; ``extra`` wins."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


MAX_CONFIG_BYTES = 1 << 20  # a config file is text of a few KiB; this stops /dev/zero-like input


def load_toml(path: str | os.PathLike) -> dict:
    """Parse a TOML file; a missing, malformed, huge or non-regular file (a FIFO, a device)
    raises ConfigError with one line, before anything is read from it."""
    try:
        info = os.stat(path)  # a symlink to a config is fine: what it points to is checked
        if not stat.S_ISREG(info.st_mode):
            kind = file_kind(info.st_mode)
            raise ConfigError(f"config file {path} is {kind}, not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {path} is {info.st_size:,} bytes; a config file is at most "
                f"{MAX_CONFIG_BYTES:,}"
            )
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests arrays or tables too deep") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text (UTF-8 TOML) file") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {reason(exc)}") from None


def user_layers(path: str | os.PathLike | None = None, sets=()) -> list[tuple[str, dict]]:
    """The ``--config`` file and ``--set`` items as raw ``(label, dict)`` layers, lowest first."""
    layers = [(f"--config {path}", load_toml(path))] if path is not None else []
    return [*layers, ("--set", parse_set(sets))]


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
    for key in ("torch_threads", "numba_threads"):
        if getattr(config.run, key) < 0:
            raise ConfigError(f"run.{key} must be >= 0")
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    if config.run.numba_threads > most:
        raise ConfigError(
            f"run.numba_threads = {config.run.numba_threads}: Numba has at most {most} threads "
            "here (NUMBA_NUM_THREADS, one per core); 0 takes one per core"
        )
    if not 0 <= config.run.seed < 2**64:
        raise ConfigError(f"run.seed must be in [0, 2**64), got {config.run.seed}")
    for key in ("checkpoint_interval", "nan_patience", "action_repeat"):
        if getattr(config.run, key) < 1:
            raise ConfigError(f"run.{key} must be >= 1, got {getattr(config.run, key)}")
    if config.log.csv_every < 1:
        raise ConfigError(f"log.csv_every must be >= 1, got {config.log.csv_every}")
    spec = games.get(config.game.name)
    obs_shape = tuple(spec.obs_shape(config.params))
    if config.run.action_repeat > 1 and spec.agent_game:
        raise ConfigError(
            f"run.action_repeat = {config.run.action_repeat} needs a single-agent game; "
            f"{config.game.name!r} has several agents per environment: use run.action_repeat = 1"
        )
    if config.model.kind == "cnn" and len(obs_shape) != 3:
        raise ConfigError(
            f"model.kind = 'cnn' needs (C, H, W) observations; {config.game.name}'s are "
            f"{obs_shape}: use model.kind = 'mlp' or 'auto'"
        )
    if config.model.hidden < 1 or config.model.layers < 1 or config.model.channels < 1:
        raise ConfigError("model.hidden, model.layers and model.channels must be >= 1")
    if config.model.core_size < 1:
        raise ConfigError(f"model.core_size must be >= 1, got {config.model.core_size}")
    check_memory(  # weights are made on the host first, whatever the device
        training_nbytes(obs_shape, config.model, "cpu", spec.obs_categories),
        f"training the model (model.hidden = {config.model.hidden})",
        torch.device("cpu"),
        fix="lower model.hidden or model.layers",
    )
    learner = LEARNERS[config.run.algo]
    if config.model.core != "none":
        if learner.check_model is None:
            recurrent = [n for n, x in LEARNERS.items() if x.check_model is not None]
            raise ConfigError(
                f"model.core = {config.model.core!r} needs a learner with recurrent policies "
                f"({', '.join(recurrent)}), not run.algo = {config.run.algo!r}; "
                "set model.core = 'none'"
            )
        learner.check_model(config.learner, config.model, config.run.algo)
    if config.run.dist_timeout_s <= 0:
        raise ConfigError(f"run.dist_timeout_s must be > 0, got {config.run.dist_timeout_s}")
    if config.log.interval_s <= 0:
        raise ConfigError("log.interval_s must be > 0")
    if config.log.replay_steps < 1:
        raise ConfigError(f"log.replay_steps must be >= 1, got {config.log.replay_steps}")
    check_curriculum(config)

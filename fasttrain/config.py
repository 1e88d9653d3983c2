"""Run configuration: frozen dataclasses whose defaults equal ``config.toml``.

Sections: ``[run]``, ``[game]``, ``[game.<name>]`` (the game's params), one section per learner
(``[ppo]``, ``[dqn]``: each learner's config dataclass, see ``fasttrain.learners``), ``[model]``,
``[log]``, per-game learner settings in ``[game.<name>.<learner>]``, and the curriculum's
``[[curriculum.stage]]`` tables (``fasttrain.curriculum.Stage``; a layer that has them replaces
the whole list of the layers below). Every field's docstring is its documentation, its comment
in config.toml and its ``--set`` help.

Precedence, lowest first: built-in defaults < per-game tuned values (``fasttrain.presets``) <
the user's ``--config`` file < ``--set`` < command-line flags. The config is built and checked
once, before any work.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import os
import stat
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from fasttrain import games
from fasttrain.curriculum import METRICS, Stage, stage_params
from fasttrain.dashboards import WANDB_MODES
from fasttrain.device import AMP_MODES, COMPILE_MODES, DEVICES
from fasttrain.distributed import BACKENDS as DIST_BACKENDS
from fasttrain.errors import ConfigError, reason
from fasttrain.kernels.env import shape_params
from fasttrain.learners import LEARNERS
from fasttrain.learners.common import check_memory
from fasttrain.models import CORES, MODEL_KINDS, training_nbytes
from fasttrain.presets import GAME_DEFAULTS, preset
from fasttrain.rundir import file_kind

__all__ = ["GAME_DEFAULTS", "Config", "ConfigError", "build", "from_dict", "load", "to_toml"]


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
    ("dqn", "loss"): ("huber", "mse"),
    ("log", "wandb"): WANDB_MODES,
}


def choices(section: str, key: str):
    """The valid values of ``section.key``, or None when any value of its type goes."""
    if (section, key) == ("run", "algo"):
        return tuple(LEARNERS)
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


@dataclass(frozen=True)
class Config:
    """A resolved run configuration. Build it with ``load`` or ``from_dict``.

    Learner and model settings take this precedence: the dataclass defaults < the game's tuned
    values (``fasttrain.presets``) < each layer in order (``--config`` file < ``--set`` < command
    line flags), where inside one layer ``[game.<name>.<learner>]`` beats ``[<learner>]`` and
    ``[game.<name>.model]`` beats ``[model]``.
    """

    run: RunConfig = field(default_factory=RunConfig)
    game: GameConfig = field(default_factory=GameConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    """the network of the chosen game (``model_for(game.name)``)"""
    log: LogConfig = field(default_factory=LogConfig)
    learners: dict = field(default_factory=dict)
    """the [<learner>] sections as written (every layer merged), by learner name"""
    games: dict = field(default_factory=dict)
    """per game: {"params": {...}, "<learner>": {...}} as written in [game.<name>] tables"""
    curriculum: tuple = ()
    """the chosen game's curriculum stages (``fasttrain.curriculum.Stage``), empty for none"""
    layers: tuple = field(default=(), compare=False, repr=False)
    """the checked layers this config was built from, lowest precedence first"""

    def __getattr__(self, name):
        # config.ppo, config.dqn: a learner's section as written (defaults where not set)
        if not name.startswith("_") and name in LEARNERS:
            return self.learners.get(name) or LEARNERS[name].config()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def game_params(self, game: str | None = None):
        """The params object of ``game`` (default: the chosen one): the game's defaults < its
        training preset (``fasttrain.presets``) < [game.<name>] of each layer."""
        game = game or self.game.name
        values = {**preset(game, "params"), **self.games.get(game, {}).get("params", {})}
        return games.get(game).make_params(**values)

    def stage_params(self, stage: int):
        """The chosen game's params in curriculum stage ``stage`` (0-based)."""
        spec = games.get(self.game.name)
        return stage_params(spec, self.game_params(), self.curriculum[stage])

    def learner(self, name: str | None = None, game: str | None = None):
        """The settings learner ``name`` (default: ``run.algo``) uses on ``game`` (default:
        the chosen one): defaults < the game's presets < each layer, as the class says."""
        name, game = name or self.run.algo, game or self.game.name
        values, _ = self._resolve(name, game)
        return LEARNERS[name].config(**values)

    def model_for(self, game: str | None = None) -> ModelConfig:
        """The network ``game`` (default: the chosen one) trains: defaults < the game's presets
        < each layer's ``[model]`` then ``[game.<name>.model]``."""
        values, _ = self._resolve("model", game or self.game.name)
        return ModelConfig(**values)

    def _layers(self) -> tuple:
        if self.layers:
            return self.layers
        # built directly (Config(...)): what differs from the defaults counts as set
        sections = {n: _changed(s) for n, s in self.learners.items()}
        sections["model"] = _changed(self.model)
        return (Layer("config", sections, self.games, self.curriculum or None),)

    def _resolve(self, name: str, game: str) -> tuple[dict, dict]:
        """Values set for learner (or ``model``) ``name`` on ``game`` and where each came
        from."""
        values, sources = {}, {}

        def apply(table: dict, label: str):
            values.update(table)
            sources.update(dict.fromkeys(table, label))

        apply(preset(game, name), f"{game} preset")
        for layer in self._layers():
            apply(layer.sections.get(name, {}), layer.label)
            specific = layer.games.get(game, {}).get(name, {})
            apply(specific, f"{layer.label} [game.{game}.{name}]")
        return values, sources

    def overrides(self) -> list[str]:
        """``key=value (source)`` for each setting of this run that differs from its default:
        the chosen learner, game params, run, model and log."""
        out = []
        values, sources = self._resolve(self.run.algo, self.game.name)
        defaults = LEARNERS[self.run.algo].config()
        for key, value in values.items():
            if value != getattr(defaults, key):
                out.append(f"{self.run.algo}.{key}={value!r} ({sources[key]})")
        game = self.game.name
        where = {f"game.{game}.{k}": f"{game} preset" for k in preset(game, "params")}
        for layer in self._layers():
            for section, table in layer.sections.items():
                where.update({f"{section}.{k}": layer.label for k in table})
            params = layer.games.get(self.game.name, {}).get("params", {})
            where.update({f"game.{self.game.name}.{k}": layer.label for k in params})
        values, sources = self._resolve("model", self.game.name)
        for key, value in values.items():
            if value != getattr(ModelConfig(), key):
                out.append(f"model.{key}={value!r} ({sources[key]})")
        defaults = {"run": RunConfig(), "log": LogConfig()}
        for section, default in defaults.items():
            for key, value in dataclasses.asdict(getattr(self, section)).items():
                if value != getattr(default, key):
                    out.append(f"{section}.{key}={value!r} ({where.get(f'{section}.{key}')})")
        params = self.game_params()
        default_params = type(params)()
        for key, value in dataclasses.asdict(params).items():
            if value != getattr(default_params, key):
                name = f"game.{self.game.name}.{key}"
                out.append(f"{name}={value!r} ({where.get(name)})")
        if self.curriculum:
            source = [layer.label for layer in self._layers() if layer.curriculum is not None]
            out.append(f"curriculum={len(self.curriculum)} stages ({source[-1]})")
        return out


def _changed(section) -> dict:
    """Fields of a dataclass instance that differ from the class defaults."""
    default = type(section)()
    return {k: v for k, v in dataclasses.asdict(section).items() if v != getattr(default, k)}


# ------------------------------------------------------------------------------- docs


@functools.cache
def _class_nodes(module: str) -> dict[str, ast.ClassDef]:
    """The top-level class definitions of a module's source, by name (each module parsed once:
    ``inspect.getsource`` of a class parses its whole module at every call)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (CleanRL style), by field name; a field a
    subclass declares again takes the subclass's (the MinAtar ports over ``MinAtarParams``)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls) -> dict[str, str]:
    """The field docstrings written in ``cls``'s own body."""
    node = _class_nodes(cls.__module__).get(cls.__qualname__)
    if node is None:  # not a top-level class of its module's source: parse the class alone
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        except (OSError, TypeError, SyntaxError):
            return {}
    body = node.body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = after.value.value.strip()
    return docs


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
        f"{where} promote_metric", default.promote_metric, metric, tuple(METRICS)
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
    base = config.game_params()
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
            raise ConfigError(f"{where}: {str(exc).splitlines()[0]}") from None
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


def build(layers) -> Config:
    """A validated Config from layers, lowest precedence first: ``(label, dict)`` or Layer."""
    layers = tuple(
        layer if isinstance(layer, Layer) else check_layer(layer[1], layer[0]) for layer in layers
    )
    merged: dict = {}
    per_game: dict = {}
    curriculum = ()
    for layer in layers:
        if layer.curriculum is not None:  # a layer's stages replace the list below it
            curriculum = layer.curriculum
        for section, table in layer.sections.items():
            merged.setdefault(section, {}).update(table)
        for game, entry in layer.games.items():
            target = per_game.setdefault(game, {"params": {}})
            for key, table in entry.items():
                target.setdefault(key, {}).update(table)
    kwargs = {name: cls(**merged.get(name, {})) for name, cls in FIXED_SECTIONS.items()}
    learners = {name: LEARNERS[name].config(**merged[name]) for name in LEARNERS if name in merged}
    config = Config(
        **kwargs, learners=learners, games=per_game, curriculum=curriculum, layers=layers
    )
    if config.game.name in games.names():  # the chosen game's network, presets applied
        config = dataclasses.replace(config, model=config.model_for())
    if config.game.name not in games.names():
        raise ConfigError(f"unknown game {config.game.name!r}; valid: {', '.join(games.names())}")
    for game, entry in per_game.items():
        _check_params(game, entry["params"])
    validate(config)
    return config


def peek(layers, section: str, key: str):
    """The value ``section.key`` takes in raw ``(label, dict)`` layers, or its default."""
    for _, data in reversed(list(layers)):
        table = data.get(section) if isinstance(data, dict) else None
        if isinstance(table, dict) and key in table:
            return table[key]
    return getattr(FIXED_SECTIONS[section](), key)


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
    for name, learner in LEARNERS.items():
        learner.validate(config.learner(name), name)
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
    obs_shape = tuple(spec.obs_shape(config.game_params()))
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
        learner.check_model(config.learner(), config.model, config.run.algo)
    if config.run.dist_timeout_s <= 0:
        raise ConfigError(f"run.dist_timeout_s must be > 0, got {config.run.dist_timeout_s}")
    if config.log.interval_s <= 0:
        raise ConfigError("log.interval_s must be > 0")
    if config.log.replay_steps < 1:
        raise ConfigError(f"log.replay_steps must be >= 1, got {config.log.replay_steps}")
    check_curriculum(config)


# ------------------------------------------------------------------------------- writing


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):  # an inline table: a stage's params
        items = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    return str(value)


def _table(lines: list, name: str, values: dict, docs: dict, array: bool = False):
    lines += ["", f"[[{name}]]" if array else f"[{name}]"]
    width = max((len(f"{k} = {_toml_value(v)}") for k, v in values.items()), default=0)
    for key, value in values.items():
        text = f"{key} = {_toml_value(value)}"
        doc = " ".join(docs.get(key, "").split())  # a comment stays on its line
        lines.append(f"{text.ljust(width)}  # {doc}" if doc else text)


def to_toml(config: Config, header: str = "") -> str:
    """The config as TOML with a comment per key (config.toml and a run's resolved config).

    ``[game.<name>.<learner>]`` holds what differs, on that game, from ``[<learner>]``: the
    presets and per-game settings, resolved, so reading the text back gives the same settings
    for every game.
    """
    lines = [header.rstrip()] if header else []
    for name, cls in SECTIONS.items():
        section = dataclasses.asdict(getattr(config, name))
        _table(lines, name, section, field_docs(cls))
        if name != "game":
            continue
        written_model = dataclasses.asdict(config.model)
        for game in games.names():
            params = dataclasses.asdict(config.game_params(game))
            _table(lines, f"game.{game}", params, field_docs(games.get(game).params_cls))
            for learner in LEARNERS.values():
                written = dataclasses.asdict(getattr(config, learner.name))
                used = dataclasses.asdict(config.learner(learner.name, game))
                differs = {k: v for k, v in used.items() if v != written[k]}
                if differs:
                    _table(
                        lines, f"game.{game}.{learner.name}", differs, field_docs(learner.config)
                    )
            used = dataclasses.asdict(config.model_for(game))
            differs = {k: v for k, v in used.items() if v != written_model[k]}
            if differs:
                _table(lines, f"game.{game}.model", differs, field_docs(ModelConfig))
    docs = field_docs(Stage)
    for stage in config.curriculum:
        values = {k: v for k, v in dataclasses.asdict(stage).items() if v is not None}
        _table(lines, "curriculum.stage", values, docs, array=True)
    if not config.curriculum and header:  # the keys, documented, for config.toml's readers
        lines += ["", CURRICULUM_HELP.rstrip()]
    return "\n".join(lines).lstrip("\n") + "\n"


CONFIG_HEADER = """\
# fasttrain configuration: every key with its default. The code holds the same defaults
# (tests/fasttrain/test_config.py checks it), so no file is needed to run.
# Use: fasttrain run --config config.toml --set ppo.learning_rate=3e-4 --set game.snake.height=8
# [game.<name>] sets that game's parameters (shown with the values the game trains with: its own
# defaults and its preset); [game.<name>.ppo], [game.<name>.dqn] and [game.<name>.model]
# override [ppo], [dqn] and [model] for that game."""


CURRICULUM_HELP = """\
# [[curriculum.stage]]: none by default. Ordered stages of game-param overrides, changed between
# iterations without recompiling (see fasttrain/curriculum.py), one table per stage, e.g.
#   [[curriculum.stage]]
#   params = { num_bots = 2 }        # on top of [game.<name>]; no param that sets buffer shapes
#   promote_at = 3.0                 # the mean that promotes (every stage but the last)
#   promote_metric = "charts/score"  # or charts/episodic_return, charts/episodic_length
#   promote_episodes = 100           # episodes the mean covers (at least)
#   min_steps = 0                    # agent steps spent in the stage before a promotion
#   [[curriculum.stage]]
#   params = { num_bots = 8, bot_policy = "greedy" }"""


if __name__ == "__main__":  # regenerate the repository's config.toml: python -m fasttrain.config
    print(to_toml(Config(), CONFIG_HEADER), end="")

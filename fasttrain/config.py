"""Run configuration: frozen dataclasses whose defaults equal ``config.toml``.

Sections: ``[run]``, ``[game]``, ``[game.<name>]`` (the game's params), ``[ppo]``, ``[dqn]``,
``[model]``, ``[log]``, and per-game learner overrides in ``[game.<name>.ppo]`` and
``[game.<name>.dqn]``. Every field's docstring is
its documentation, its comment in config.toml and its ``--set`` help.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import sys
import textwrap
from dataclasses import dataclass, field

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from fasttrain import games


class ConfigError(ValueError):
    """A bad config file, key, value or combination; the message is one line."""


@dataclass(frozen=True)
class RunConfig:
    algo: str = "ppo"
    """learning algorithm: ppo | dqn"""
    seed: int = 0
    """seed of the environments, the network and the sampling"""
    device: str = "auto"
    """auto | cpu | cuda: where environments and learner run (auto: cuda when present)"""
    amp: str = "off"
    """off | bf16 | fp16: mixed precision for the update (fp16 uses a GradScaler; CUDA only)"""
    compile: str = "off"
    """off | default | reduce-overhead | max-autotune: torch.compile the network"""
    torch_threads: int = 0
    """torch intra-op threads (0: one per core)"""
    numba_threads: int = 0
    """Numba threads for the environments (0: one per core)"""
    checkpoint_interval: int = 100
    """write checkpoint.pt every this many iterations (and always at the end and on Ctrl-C)"""


@dataclass(frozen=True)
class GameConfig:
    name: str = "snake"
    """game to train on (see `fasttrain games`)"""


@dataclass(frozen=True)
class PPOConfig:
    total_timesteps: int = 5_000_000
    """environment steps to train for (--steps)"""
    num_envs: int = 256
    """parallel environments"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE trace decay"""
    num_minibatches: int = 8
    """minibatches per epoch (batch = num_envs * num_steps must divide evenly)"""
    update_epochs: int = 2
    """passes over each batch"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """policy ratio clipping"""
    clip_vloss: bool = True
    """clip the value loss as in the PPO paper"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient norm clipping"""
    target_kl: float = 0.0
    """stop an update early when the approximate KL exceeds this (0: never)"""


@dataclass(frozen=True)
class DQNConfig:
    total_timesteps: int = 500_000
    """environment steps to train for (--steps)"""
    num_envs: int = 128
    """parallel environments"""
    num_steps: int = 64
    """vectorised steps per iteration (the unit of logging and run.checkpoint_interval)"""
    buffer_size: int = 100_000
    """replay capacity in transitions (rounded down to whole steps of num_envs envs)"""
    learning_starts: int = 10_000
    """environment steps of random-ish acting before the first update"""
    train_frequency: int = 4
    """vectorised steps between updates (each adds num_envs transitions; divides num_steps)"""
    gradient_steps: int = 1
    """gradient steps per update"""
    batch_size: int = 256
    """transitions sampled per gradient step"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    gamma: float = 0.99
    """discount factor"""
    target_network_frequency: int = 10_000
    """environment steps between target network updates"""
    tau: float = 1.0
    """target update rate (1: copy the online network)"""
    start_e: float = 1.0
    """exploration epsilon at the start"""
    end_e: float = 0.05
    """exploration epsilon at the end of the schedule"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which epsilon decays linearly from start_e to end_e"""
    n_step: int = 1
    """n-step returns (cut at episode ends; truncation bootstraps from the final observation)"""
    double_q: bool = False
    """Double DQN: the online network picks the next action, the target network values it"""
    dueling: bool = False
    """dueling heads: Q = V + A - mean(A)"""
    prioritized: bool = False
    """prioritized replay, proportional to |TD error|^prio_alpha"""
    prio_alpha: float = 0.6
    """priority exponent"""
    prio_beta: float = 0.4
    """importance-sampling exponent at the start, annealed linearly to 1"""
    loss: str = "mse"
    """huber | mse: TD loss"""
    max_grad_norm: float = 10.0
    """gradient norm clipping"""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "auto"
    """auto | mlp | cnn (auto: cnn for (C, H, W) observations on cuda, mlp otherwise)"""
    hidden: int = 128
    """width of the hidden layer(s)"""
    layers: int = 2
    """hidden layers of the mlp"""
    channels: int = 16
    """channels of each cnn convolution"""
    activation: str = "tanh"
    """tanh | relu: mlp activation"""


@dataclass(frozen=True)
class LogConfig:
    interval_s: float = 5.0
    """seconds between log lines"""
    progress: bool = True
    """show a progress bar when stdout is a terminal"""


SECTIONS = {"run": RunConfig, "game": GameConfig, "ppo": PPOConfig, "dqn": DQNConfig,
            "model": ModelConfig, "log": LogConfig}  # fmt: skip
LEARNER_SECTIONS = ("ppo", "dqn")  # may be overridden per game in [game.<name>.<section>]
CHOICES = {
    ("run", "algo"): ("ppo", "dqn"),
    ("run", "device"): ("auto", "cpu", "cuda"),
    ("run", "amp"): ("off", "bf16", "fp16"),
    ("run", "compile"): ("off", "default", "reduce-overhead", "max-autotune"),
    ("model", "kind"): ("auto", "mlp", "cnn"),
    ("model", "activation"): ("tanh", "relu"),
    ("dqn", "loss"): ("huber", "mse"),
}
# Per-game tuned learner settings: the defaults of [game.<name>.ppo] and [game.<name>.dqn]
# (also in config.toml). CartPole's DQN values pass tests/fasttrain/test_dqn.py's learning test.
GAME_DEFAULTS: dict[str, dict[str, dict]] = {
    # 12x12 Snake on 2 CPU cores: mean score ~26 after 20M steps in ~4 minutes
    "snake": {
        "ppo": {"total_timesteps": 20_000_000, "num_envs": 1024, "num_steps": 32},
        # mean score ~8 after 5M steps (~5 minutes): 4 sampled transitions per env transition;
        # fewer updates run 100-260k SPS on 2 cores but barely learn
        "dqn": {
            "total_timesteps": 5_000_000,
            "num_envs": 64,
            "num_steps": 32,
            "train_frequency": 1,
            "n_step": 3,
            "double_q": True,
            "learning_rate": 5e-4,
            "exploration_fraction": 0.2,
        },
    },
    "cartpole": {
        # mean return 500 (the maximum) after ~400k steps, ~10 s on 2 CPU cores
        "ppo": {
            "total_timesteps": 500_000,
            "num_envs": 64,
            "num_steps": 32,
            "num_minibatches": 4,
            "update_epochs": 4,
            "learning_rate": 2.5e-3,
            "ent_coef": 0.0,
        },
        "dqn": {
            "num_envs": 16,
            "num_steps": 32,
            "buffer_size": 20_000,
            "train_frequency": 1,
            "batch_size": 128,
            "target_network_frequency": 500,
            "n_step": 3,
            "double_q": True,
        },
    },
}


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    game: GameConfig = field(default_factory=GameConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    dqn: DQNConfig = field(default_factory=DQNConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    log: LogConfig = field(default_factory=LogConfig)
    games: dict = field(default_factory=dict)
    """per game: {"params": {...}, "ppo": {...}, "dqn": {...}} as given in [game.<name>] sections"""

    def game_params(self):
        """The chosen game's params object (defaults plus [game.<name>] overrides)."""
        spec = games.get(self.game.name)
        return spec.make_params(**self.games.get(self.game.name, {}).get("params", {}))

    def learner(self, section: str = "ppo"):
        """The learner config with the chosen game's [game.<name>.<section>] overrides applied."""
        base = getattr(self, section)
        overrides = {**GAME_DEFAULTS.get(self.game.name, {}).get(section, {}),
                     **self.games.get(self.game.name, {}).get(section, {})}  # fmt: skip
        return dataclasses.replace(base, **overrides)


# ------------------------------------------------------------------------------- docs


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (CleanRL style), by field name."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = after.value.value.strip()
    return docs


# ------------------------------------------------------------------------------- loading


def _check_value(where: str, default, value, choices=None):
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
    if choices and value not in choices:
        raise ConfigError(f"{where} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _section_values(name: str, cls, table: dict) -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] must be a table")
    valid = {f.name: f for f in dataclasses.fields(cls) if f.name != "games"}
    out = {}
    for key, value in table.items():
        if key not in valid:
            raise ConfigError(f"unknown key {key!r} in [{name}]; valid: {', '.join(valid)}")
        section = name.split(".")[-1]
        out[key] = _check_value(f"{name}.{key}", valid[key].default, value,
                                CHOICES.get((section, key)))  # fmt: skip
    return out


def _game_tables(table: dict) -> tuple[dict, dict]:
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    per_game = {}
    for name, sub in table.items():
        if not isinstance(sub, dict):
            continue
        if name not in games.names():
            raise ConfigError(
                f"unknown game section [game.{name}]; valid: {', '.join(games.names())}"
            )
        spec = games.get(name)
        entry = {"params": {}}
        for key, value in sub.items():
            if key in LEARNER_SECTIONS:
                entry[key] = _section_values(f"game.{name}.{key}", SECTIONS[key], value)
            else:
                entry["params"][key] = value
        try:
            spec.make_params(**entry["params"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[game.{name}]: {exc}") from None
        per_game[name] = entry
    return plain, per_game


def from_dict(data: dict) -> Config:
    """Build and validate a Config from a parsed TOML document."""
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"unknown section [{sorted(unknown)[0]}]; valid: {', '.join(SECTIONS)}")
    kwargs = {}
    per_game = {}
    for name, cls in SECTIONS.items():
        table = data.get(name, {})
        if name == "game":
            table, per_game = _game_tables(table)
        kwargs[name] = cls(**_section_values(name, cls, table))
    config = Config(**kwargs, games=per_game)
    if config.game.name not in games.names():
        raise ConfigError(f"unknown game {config.game.name!r}; valid: {', '.join(games.names())}")
    validate(config)
    return config


def parse_set(assignments) -> dict:
    """``["ppo.learning_rate=3e-4", "game.snake.height=8"]`` as a nested dict."""
    out: dict = {}
    for item in assignments:
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
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {path}: {key} is a value, not a section")
        node[keys[-1]] = value
    return out


def merge(base: dict, extra: dict) -> dict:
    """Recursive dict merge; ``extra`` wins."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_toml(path: str | os.PathLike) -> dict:
    """Parse a TOML file; a missing or malformed file raises ConfigError with one line."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def load(path: str | os.PathLike | None = None, sets=(), overrides: dict | None = None) -> Config:
    """Defaults, then the TOML file at ``path``, then ``--set`` items, then ``overrides``."""
    data = load_toml(path) if path is not None else {}
    data = merge(merge(data, parse_set(sets)), overrides or {})
    return from_dict(data)


def validate(config: Config) -> None:
    """Check ranges and the consistency of sizes; raise ConfigError with one line.

    Each learner section is checked as written ([ppo], which other games use) and as it applies
    to the chosen game (with [game.<name>.ppo] on top).
    """
    game = config.game.name
    for section, check in (("ppo", validate_ppo), ("dqn", validate_dqn)):
        check(getattr(config, section), section)
        # the base section passed, so a failure here comes from the game's override
        check(config.learner(section), f"game.{game}.{section}")
    for section, key in (("run", "torch_threads"), ("run", "numba_threads")):
        if getattr(getattr(config, section), key) < 0:
            raise ConfigError(f"{section}.{key} must be >= 0")
    if config.run.checkpoint_interval < 1:
        raise ConfigError("run.checkpoint_interval must be >= 1")
    if config.model.hidden < 1 or config.model.layers < 1 or config.model.channels < 1:
        raise ConfigError("model.hidden, model.layers and model.channels must be >= 1")
    if config.log.interval_s <= 0:
        raise ConfigError("log.interval_s must be > 0")


def validate_ppo(ppo: PPOConfig, where: str = "ppo") -> None:
    """Ranges and sizes of a PPO config; raise ConfigError with one line."""
    positive = ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    for key in positive:
        if getattr(ppo, key) < 1:
            raise ConfigError(f"{where}.{key} must be >= 1, got {getattr(ppo, key)}")
    batch = ppo.num_envs * ppo.num_steps
    if batch % ppo.num_minibatches:
        raise ConfigError(
            f"{where}: batch num_envs*num_steps = {batch} does not split into "
            f"{where}.num_minibatches = {ppo.num_minibatches} equal minibatches"
        )
    for key in ("gamma", "gae_lambda"):
        if not 0.0 <= getattr(ppo, key) <= 1.0:
            raise ConfigError(f"{where}.{key} must be in [0, 1], got {getattr(ppo, key)}")
    for key in ("learning_rate", "clip_coef", "max_grad_norm"):
        if getattr(ppo, key) <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {getattr(ppo, key)}")
    for key in ("ent_coef", "vf_coef", "target_kl"):
        if getattr(ppo, key) < 0:
            raise ConfigError(f"{where}.{key} must be >= 0, got {getattr(ppo, key)}")


def validate_dqn(dqn: DQNConfig, where: str = "dqn") -> None:
    """Ranges and replay sizes of a DQN config; raise ConfigError with one line."""
    positive = ("total_timesteps", "num_envs", "num_steps", "buffer_size", "train_frequency",
                "gradient_steps", "batch_size", "target_network_frequency", "n_step")  # fmt: skip
    for key in positive:
        if getattr(dqn, key) < 1:
            raise ConfigError(f"{where}.{key} must be >= 1, got {getattr(dqn, key)}")
    if dqn.learning_starts < 0:
        raise ConfigError(f"{where}.learning_starts must be >= 0, got {dqn.learning_starts}")
    if dqn.num_steps % dqn.train_frequency:
        raise ConfigError(f"{where}.num_steps = {dqn.num_steps} is not a multiple of "
                          f"train_frequency = {dqn.train_frequency}")  # fmt: skip
    if dqn.buffer_size < dqn.num_envs * dqn.n_step:
        need = dqn.num_envs * dqn.n_step
        raise ConfigError(
            f"{where}.buffer_size = {dqn.buffer_size} must hold n_step = {dqn.n_step} "
            f"steps of num_envs = {dqn.num_envs} envs (>= {need})"
        )
    if dqn.learning_starts >= dqn.total_timesteps:
        raise ConfigError(f"{where}.learning_starts = {dqn.learning_starts} >= total_timesteps = "
                          f"{dqn.total_timesteps}: no update would ever run")  # fmt: skip
    for key in ("gamma", "start_e", "end_e", "exploration_fraction", "prio_beta"):
        if not 0.0 <= getattr(dqn, key) <= 1.0:
            raise ConfigError(f"{where}.{key} must be in [0, 1], got {getattr(dqn, key)}")
    if not 0.0 < dqn.tau <= 1.0:
        raise ConfigError(f"{where}.tau must be in (0, 1], got {dqn.tau}")
    for key in ("learning_rate", "max_grad_norm"):
        if getattr(dqn, key) <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {getattr(dqn, key)}")
    if dqn.prio_alpha < 0:
        raise ConfigError(f"{where}.prio_alpha must be >= 0, got {dqn.prio_alpha}")


# ------------------------------------------------------------------------------- writing


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _table(lines: list, name: str, values: dict, docs: dict):
    lines += ["", f"[{name}]"]
    width = max((len(f"{k} = {_toml_value(v)}") for k, v in values.items()), default=0)
    for key, value in values.items():
        text = f"{key} = {_toml_value(value)}"
        doc = docs.get(key)
        lines.append(f"{text.ljust(width)}  # {doc}" if doc else text)


def to_toml(config: Config, header: str = "") -> str:
    """The config as TOML with a comment per key (config.toml and a run's resolved config)."""
    lines = [header.rstrip()] if header else []
    for name, cls in SECTIONS.items():
        _table(lines, name, dataclasses.asdict(getattr(config, name)), field_docs(cls))
        if name == "game":
            for game in games.names():
                spec = games.get(game)
                entry = config.games.get(game, {})
                params = dataclasses.asdict(spec.make_params(**entry.get("params", {})))
                _table(lines, f"game.{game}", params, field_docs(spec.params_cls))
                for section in LEARNER_SECTIONS:
                    values = {**GAME_DEFAULTS.get(game, {}).get(section, {}),
                              **entry.get(section, {})}  # fmt: skip
                    if values:
                        _table(lines, f"game.{game}.{section}", values,
                               field_docs(SECTIONS[section]))  # fmt: skip
    return "\n".join(lines).lstrip("\n") + "\n"


CONFIG_HEADER = """\
# fasttrain configuration: every key with its default. The code holds the same defaults
# (tests/fasttrain/test_config.py checks it), so no file is needed to run.
# Use: fasttrain run --config config.toml --set ppo.learning_rate=3e-4 --set game.snake.height=8
# [game.<name>] sets that game's parameters; [game.<name>.ppo] and [game.<name>.dqn] override
# [ppo] and [dqn] for that game."""


if __name__ == "__main__":  # regenerate the repository's config.toml: python -m fasttrain.config
    print(to_toml(Config(), CONFIG_HEADER), end="")

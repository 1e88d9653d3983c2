"""Checkpoints: written atomically, checksummed, tied to the run they belong to, read with
one-line errors, loadable as a playing agent, and never able to run code when read.

File format 3 (this version writes it): ``MAGIC`` (16 bytes), the payload's length (8 bytes, big
endian), its SHA-256 digest (32 bytes), then the payload: the state in ``fasttrain.run.statefile``'s
format, a JSON tree plus raw array bytes, which names no Python object and so cannot carry code.
A flipped or missing byte anywhere in the payload fails the digest, so ``load`` refuses it before
reading it.

Formats 1 (a bare ``torch.save`` of the state) and 2 (a pickle behind the header) were written
only while fasttrain was developed, before any release; they are refused in one line, unread:
no file reaches an unpickler, not even torch's restricted one.

Every checkpoint the runner writes holds ``identity``: what must match for a run to continue
from it (game, its params, learner, model settings, num_envs, observation shape).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from pathlib import Path

import torch

from fasttrain import games
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError, RunError
from fasttrain.learners import LEARNERS, savedstate
from fasttrain.run import statefile
from fasttrain.run.rundir import write_atomic

FILENAME = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"  # a population member's checkpoint before its newest
FORMAT = 3
MAGIC = b"\x89fasttrain-ckpt\n"  # a non-ASCII first byte, as PNG does: no text file starts so
HEADER = len(MAGIC) + 8 + 32  # magic, payload length, SHA-256 digest


def checkpoint_path(path) -> Path:
    """``path`` itself if it is a file, else ``path/checkpoint.pt``."""
    path = Path(path)
    return path if path.suffix == ".pt" else path / FILENAME


# ------------------------------------------------------------------------------- identity


def identity(
    config, num_envs: int | None = None, obs_shape: tuple | None = None, world: int = 1
) -> dict:
    """What a checkpoint must share with a run to continue it (defaults: from ``config``)."""
    params = config.params
    if num_envs is None:
        num_envs = config.learner.num_envs
    if obs_shape is None:
        obs_shape = games.get(config.game.name).obs_shape(params)
    return {
        "game": config.game.name,
        "game_params": dataclasses.asdict(params),
        "learner": config.run.algo,
        "model": dataclasses.asdict(config.model),
        "num_envs": int(num_envs),
        "obs_shape": tuple(int(n) for n in obs_shape),
        "world_size": int(world),  # data-parallel ranks (torchrun); 1 for one process
    }


def saved_identity(state: dict) -> dict | None:
    """The identity a checkpoint records, or, where it records none, the one of its config."""
    if isinstance(state.get("identity"), dict):
        return state["identity"]
    try:
        return identity(cfg.from_dict(cfg.tomllib.loads(state["config"]), "checkpoint"))
    except (KeyError, TypeError, ValueError):  # ConfigError and TOMLDecodeError are ValueErrors
        return None


def check_identity(
    state: dict,
    config,
    num_envs: int | None = None,
    obs_shape: tuple | None = None,
    world: int = 1,
) -> None:
    """Refuse, in one line naming the first difference, a checkpoint ``state`` of another run."""
    saved = saved_identity(state)
    if saved is None:
        return  # nothing recorded to compare; the learner's own checks still run
    this = identity(config, num_envs, obs_shape, world)
    ranks = saved.get("world_size", 1)  # older checkpoints: one process
    if ranks != world:
        how = "in one process" if ranks == 1 else f"with --nproc {ranks} (torchrun)"
        raise ConfigError(
            f"checkpoint was written by {ranks} rank{'s' if ranks > 1 else ''} and this run has "
            f"{world}; resume it {how}"
        )
    if saved.get("game", this["game"]) != this["game"]:
        raise ConfigError(f"checkpoint is for game {saved['game']!r}, this run is {this['game']!r}")
    if saved.get("learner", this["learner"]) != this["learner"]:
        raise ConfigError(
            f"checkpoint is for learner {saved['learner']!r}, this run uses {this['learner']!r}"
        )
    sections = (("game_params", f"game.{this['game']}"), ("model", "model"))
    for key, section in sections:
        # settings a later version added are missing from older checkpoints: not a difference
        for name, value in saved.get(key, {}).items():
            if name in this[key] and value != this[key][name]:
                raise ConfigError(
                    f"checkpoint {section}.{name} = {value!r}, this run has {this[key][name]!r}"
                )
    if saved.get("num_envs", this["num_envs"]) != this["num_envs"]:
        raise ConfigError(
            f"checkpoint {this['learner']}.num_envs = {saved['num_envs']}, "
            f"this run has {this['num_envs']}"
        )
    shape = tuple(saved.get("obs_shape", this["obs_shape"]))
    if shape != this["obs_shape"]:
        raise ConfigError(
            f"checkpoint observations are {shape}, this run's are {this['obs_shape']}"
        )


# ------------------------------------------------------------------------------- save, load


def save(path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically with a checksum: never half a checkpoint."""
    chunks = statefile.encode({"format": FORMAT, **state})  # views, not copies: replay buffers
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    size = sum(memoryview(chunk).nbytes for chunk in chunks)
    head = MAGIC + size.to_bytes(8, "big") + digest.digest()
    write_atomic(path, [head, *chunks], what="checkpoint")


def read_payload(path: Path, data: bytes) -> memoryview:
    """The payload of a checkpoint file's bytes, its checksum verified."""
    view = memoryview(data)
    if not data.startswith(MAGIC):
        raise ConfigError(_not_ours(path, data))
    if len(data) < HEADER:
        raise ConfigError(f"checkpoint {path} is corrupt: truncated in its header")
    size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "big")
    digest = data[len(MAGIC) + 8 : HEADER]
    payload = view[HEADER:]
    if len(payload) < size:
        raise ConfigError(f"checkpoint {path} is corrupt: truncated ({len(payload)} of {size} B)")
    if len(payload) > size or hashlib.sha256(payload).digest() != digest:
        raise ConfigError(f"checkpoint {path} is corrupt: checksum mismatch")
    return payload


PICKLE_STARTS = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive, a bare pickle (protocol 2+)


def _not_ours(path: Path, data: bytes) -> str:
    """The one line for a file without this format's header: what it looks like."""
    if data.startswith(PICKLE_STARTS):
        return (
            f"checkpoint {path} is a pickle (torch.save, or fasttrain's development formats 1 "
            "and 2); fasttrain reads only its own format 3 and never unpickles a file"
        )
    return f"checkpoint {path} is not a fasttrain checkpoint"


def read_state(path, arrays: bool = True) -> dict:
    """The state dict in a checkpoint file, checksum verified, without running any code from
    it; no check of what the state holds (``load`` does that). With ``arrays=False`` a format-3
    file's arrays stay unread: ``statefile.ArrayInfo`` stands in for each."""
    path = checkpoint_path(path)
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if not data:
        raise ConfigError(f"checkpoint {path} is empty")
    payload = read_payload(path, data)
    if not statefile.is_state(payload):
        raise ConfigError(
            f"checkpoint {path} holds a pickle (fasttrain's development format 2); fasttrain "
            "reads only its own format 3 and never unpickles a file"
        )
    try:
        return statefile.decode(payload) if arrays else statefile.skeleton(payload)
    except statefile.StateFileError as exc:
        raise ConfigError(f"checkpoint {path} is not a fasttrain checkpoint: {exc}") from None


def load(path) -> dict:
    """Read and verify a checkpoint; a missing, corrupt, foreign or hostile file is a one-line
    error, and nothing in it runs."""
    path = checkpoint_path(path)
    state = read_state(path)
    if (
        not isinstance(state, dict)
        or not savedstate.is_int(state.get("format"))
        or state["format"] != FORMAT
        or "model" not in state
        or not all(_is_network(state[key]) for key in networks(state) if key in state)
        or not isinstance(state.get("config"), str)
    ):
        raise ConfigError(f"{path} is not a fasttrain checkpoint")
    savedstate.check_common(state)
    return state


def check_model_size(path, config, weights: dict) -> None:
    """Refuse, before any network is built, a config whose network is larger than the weights
    the checkpoint holds: its torso alone (counted by arithmetic, as ``config.validate``
    counts it against the host's memory) must fit in them, so a small file cannot make a
    reader build, and initialise, a large network only to find its weights do not fit."""
    from fasttrain.models import torso_numel

    spec = games.get(config.game.name)
    needed = torso_numel(spec.obs_shape(config.params), config.model, "cpu", spec.obs_categories)
    held = sum(t.numel() for t in weights.values() if isinstance(t, torch.Tensor))
    if needed > held:
        model = config.model
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)}: its config's network (model.hidden = "
            f"{model.hidden}, model.layers = {model.layers}) has {needed:,} weights in its torso "
            f"alone and the checkpoint holds {held:,}; the config does not fit its weights"
        )


def _is_network(weights) -> bool:
    """A network's state dict: names to tensors."""
    return isinstance(weights, dict) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    )


def describe(path) -> list[str]:
    """What a checkpoint holds, as lines for ``fasttrain checkpoint inspect``: its format, run,
    progress and networks, read without loading any weights into a network (and, for format
    3, without reading any array)."""
    path = checkpoint_path(path)
    state = read_state(path, arrays=False)
    if not isinstance(state, dict):
        raise ConfigError(f"{path} is not a fasttrain checkpoint")
    savedstate.check_common(state)
    fmt = state.get("format", "?")
    checked = "checksum verified" if path.read_bytes()[: len(MAGIC)] == MAGIC else "no checksum"
    lines = [f"{path}: format {fmt}, {path.stat().st_size:,} bytes, {checked}"]
    try:
        config = cfg.tomllib.loads(state.get("config", ""))
    except (cfg.tomllib.TOMLDecodeError, TypeError, RecursionError):
        config = {}
    saved = state.get("identity") if isinstance(state.get("identity"), dict) else {}
    run = config.get("run", {}) if isinstance(config.get("run"), dict) else {}
    section = config.get("game", {}) if isinstance(config.get("game"), dict) else {}
    game = saved.get("game", section.get("name", "?"))
    ranks = saved.get("world_size", 1)
    lines.append(
        f"run: {game}, learner {saved.get('learner', run.get('algo', '?'))}, seed "
        f"{run.get('seed', '?')}, device {state.get('device', '?')}, "
        f"{saved.get('num_envs', '?')} envs, {ranks} rank{'' if ranks == 1 else 's'}"
    )
    if saved.get("game_params"):
        params = ", ".join(f"{k}={v!r}" for k, v in saved["game_params"].items())
        lines.append(f"[game.{game}]: {params}")
    if saved.get("model"):
        lines.append("[model]: " + ", ".join(f"{k}={v!r}" for k, v in saved["model"].items()))
    step, iteration = state.get("global_step", "?"), state.get("iteration", "?")
    step = f"{step:,}" if isinstance(step, int) else step
    lines.append(f"progress: {step} steps, {iteration} iterations")
    for key in networks(state):
        weights = state.get(key)
        if isinstance(weights, dict):
            arrays = [t for t in weights.values() if isinstance(t, ARRAYS)]
            sizes = [_numel(t) for t in arrays]
            dtypes = sorted({_dtype(t) for t in arrays})
            lines.append(
                f"network {key}: {len(sizes)} tensors, {sum(sizes):,} weights ({', '.join(dtypes)})"
            )
    rest = [k for k in state if k not in (*networks(state), "config", "identity", "format")]
    lines.append("also holds: " + ", ".join(rest))
    return lines


ARRAYS = (statefile.ArrayInfo, torch.Tensor)


def _numel(array) -> int:
    return array.numel if isinstance(array, statefile.ArrayInfo) else int(array.numel())


def _dtype(array) -> str:
    text = array.dtype if isinstance(array, statefile.ArrayInfo) else str(array.dtype)
    return text.removeprefix("torch.")


def config_table(path, state: dict) -> dict:
    """The config TOML a checkpoint holds, parsed; one line if it does not parse."""
    try:
        return cfg.tomllib.loads(state["config"])
    except (cfg.tomllib.TOMLDecodeError, RecursionError):
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)} holds an unreadable config"
        ) from None


def saved_config(path, state: dict):
    """The run config a checkpoint was written with; one line if it does not parse."""
    table = config_table(path, state)
    try:
        return cfg.from_dict(table, "checkpoint")
    except ConfigError as exc:
        raise ConfigError(f"checkpoint {checkpoint_path(path)}: {exc}") from None


def networks(state: dict) -> tuple:
    """The keys of a trainer's state that hold networks: what its learner declares
    (``Learner.networks``; ``model`` for a learner this version does not know)."""
    name = state.get("learner")
    learner = LEARNERS.get(name) if isinstance(name, str) else None
    return learner.networks if learner is not None else ("model",)


def weight_fault(state: dict) -> tuple[str, str] | None:
    """``("model.torso.0.weight", "not finite")``: the first floating-point network tensor of a
    trainer's state that is not finite or holds a weight beyond ``savedstate.MAX_WEIGHT``
    (``savedstate.OVERSIZED``), and which; None when every one is sane."""
    for key in networks(state):
        weights = state.get(key)
        for name, tensor in weights.items() if isinstance(weights, dict) else ():
            fault = savedstate.bad_weight(tensor) if isinstance(tensor, torch.Tensor) else None
            if fault is not None:
                return f"{key}.{name}", fault
    return None


class Agent:
    """A checkpoint's player: ``agent(obs)`` (``agent(obs, episode_starts)`` where
    ``is_recurrent``) gives actions; observations of another shape are refused in one line."""

    def __init__(self, act, obs_shape):
        self.act = act
        self.obs_shape = tuple(obs_shape)
        self.is_recurrent = getattr(act, "is_recurrent", False)

    def __call__(self, obs, *args):
        obs = torch.as_tensor(obs)
        if tuple(obs.shape[1:]) != self.obs_shape or obs.ndim != len(self.obs_shape) + 1:
            shape = ", ".join(str(n) for n in ("rows", *self.obs_shape))
            raise ValueError(
                f"this agent plays observations of shape ({shape}), got {tuple(obs.shape)}"
            )
        return self.act(obs, *args)

    def reset(self) -> None:
        """Forget every row's memory (recurrent agents; nothing for the others)."""
        if hasattr(self.act, "reset"):
            self.act.reset()

    def __getattr__(self, name):  # the learner's own actor: its state, its name
        return getattr(self.act, name)


def load_agent(path, game: str | None = None, greedy: bool = True, seed: int = 0):
    """An ``obs -> actions`` callable from a run directory (greedy, or a seeded sample of the
    policy), and the game's params."""
    state = load(path)
    config = saved_config(path, state)
    fault = weight_fault({"model": state["model"]})
    if fault is not None:
        what = "non-finite" if fault[1] == "not finite" else f"oversized ({fault[1]})"
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)} holds {what} weights ({fault[0]}); it cannot play"
        )
    if game is not None and game != config.game.name:
        raise ConfigError(f"checkpoint was trained on {config.game.name!r}, not {game!r}")
    check_model_size(path, config, state["model"])
    spec = games.get(config.game.name)
    params = config.params
    reached = state.get("curriculum")  # a curriculum run plays in the stage it reached
    if config.curriculum and reached and 0 <= int(reached["stage"]) < len(config.curriculum):
        params = config.stage_params(int(reached["stage"]))
    try:
        actor = LEARNERS[config.run.algo].actor
        # keywords added after the first learners: passed to the actors that take them
        options = {"obs_categories": spec.obs_categories, "greedy": greedy, "seed": seed}
        accepted = inspect.signature(actor).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            options = {k: v for k, v in options.items() if k in accepted}
        act = actor(
            config,
            spec.obs_shape(params),
            spec.obs_dtype,
            spec.actions(params),
            state["model"],
            **options,
        )
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        # load_state_dict lists every mismatch over many lines; the first says enough
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0] if lines else type(exc).__name__
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)} does not fit its {config.run.algo} model: {detail}"
        ) from None
    return Agent(act, spec.obs_shape(params)), vars(params)

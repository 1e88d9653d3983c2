"""Checkpoints: written atomically, checksummed, tied to the run they belong to, read with
one-line errors, loadable as a playing agent.

File format 2 (this version writes it): ``MAGIC`` (16 bytes), the payload's length (8 bytes, big
endian), its SHA-256 digest (32 bytes), then the payload: ``torch.save`` of the state dict. A
flipped or missing byte anywhere in the payload fails the digest, so ``load`` refuses it before
unpickling. Format 1 (earlier versions) is a bare ``torch.save`` of the state dict; ``load``
still reads it, without a checksum.

Every checkpoint the runner writes holds ``identity``: what must match for a run to continue
from it (game, its params, learner, model settings, num_envs, observation shape).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
from pathlib import Path

import torch

from fasttrain import config as cfg
from fasttrain import games
from fasttrain.errors import ConfigError, RunError
from fasttrain.learners import LEARNERS
from fasttrain.rundir import write_atomic

FILENAME = "checkpoint.pt"
FORMAT = 2
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
    params = config.game_params()
    if num_envs is None:
        num_envs = config.learner().num_envs
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
    """The identity a checkpoint records; for format 1, the one of its config, if readable."""
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
    buffer = io.BytesIO()
    buffer.write(bytes(HEADER))  # filled in below, once the payload's digest is known
    torch.save({"format": FORMAT, **state}, buffer)
    data = buffer.getbuffer()  # a view, not a copy: checkpoints with replay buffers are big
    payload = data[HEADER:]
    data[:HEADER] = MAGIC + len(payload).to_bytes(8, "big") + hashlib.sha256(payload).digest()
    write_atomic(path, data, what="checkpoint")


def read_payload(path: Path, data: bytes) -> memoryview:
    """The torch payload of a checkpoint file's bytes, its checksum verified."""
    view = memoryview(data)
    if not data.startswith(MAGIC):
        return view  # format 1: a bare torch file, no checksum to verify
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


def load(path) -> dict:
    """Read and verify a checkpoint; a missing, corrupt or foreign file is a one-line error."""
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
    try:
        # weights_only=False: the state holds NumPy arrays and RNG states; the checksum
        # guards against damage, not against a hostile file
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as exc:  # pickle raises anything on foreign or damaged bytes
        raise ConfigError(
            f"checkpoint {path} is corrupt or not a fasttrain checkpoint ({type(exc).__name__})"
        ) from None
    if (
        not isinstance(state, dict)
        or state.get("format") not in (1, FORMAT)
        or "model" not in state
        or not isinstance(state.get("config"), str)
    ):
        raise ConfigError(f"{path} is not a fasttrain checkpoint")
    return state


def saved_config(path, state: dict):
    """The run config a checkpoint was written with; one line if it does not parse."""
    try:
        return cfg.from_dict(cfg.tomllib.loads(state["config"]), "checkpoint")
    except cfg.tomllib.TOMLDecodeError:
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)} holds an unreadable config"
        ) from None
    except ConfigError as exc:
        raise ConfigError(f"checkpoint {checkpoint_path(path)}: {exc}") from None


def load_agent(path, game: str | None = None, greedy: bool = True, seed: int = 0):
    """An ``obs -> actions`` callable from a run directory (greedy, or a seeded sample of the
    policy), and the game's params."""
    state = load(path)
    config = saved_config(path, state)
    if game is not None and game != config.game.name:
        raise ConfigError(f"checkpoint was trained on {config.game.name!r}, not {game!r}")
    spec = games.get(config.game.name)
    params = config.game_params()
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
            config, spec.obs_shape(params), spec.obs_dtype, spec.actions(params), state["model"],
            **options,
        )  # fmt: skip
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        # load_state_dict lists every mismatch over many lines; the first says enough
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0] if lines else type(exc).__name__
        raise ConfigError(
            f"checkpoint {checkpoint_path(path)} does not fit its {config.run.algo} model: {detail}"
        ) from None
    return act, vars(params)

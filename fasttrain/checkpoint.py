"""Checkpoints: written atomically, read with clear errors, loadable as a playing agent."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from fasttrain import config as cfg
from fasttrain import games
from fasttrain.errors import ConfigError
from fasttrain.learners import LEARNERS

FILENAME = "checkpoint.pt"
FORMAT = 1


def checkpoint_path(path) -> Path:
    """``path`` itself if it is a file, else ``path/checkpoint.pt``."""
    path = Path(path)
    return path if path.suffix == ".pt" else path / FILENAME


def save(path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically (temp file + rename): never half a checkpoint."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"format": FORMAT, **state}, tmp)
    os.replace(tmp, path)


def load(path) -> dict:
    """Read a checkpoint; a missing or corrupt file raises ConfigError with one line."""
    path = checkpoint_path(path)
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ConfigError(
            f"checkpoint {path} is corrupt or unreadable: {type(exc).__name__}"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or "model" not in state:
        raise ConfigError(f"{path} is not a fasttrain checkpoint (format {FORMAT})")
    return state


def load_agent(path, game: str | None = None):
    """A greedy ``obs -> actions`` callable from a run directory, and the game's params."""
    state = load(path)
    config = cfg.from_dict(cfg.tomllib.loads(state["config"]), "checkpoint")
    if game is not None and game != config.game.name:
        raise ConfigError(f"checkpoint was trained on {config.game.name!r}, not {game!r}")
    spec = games.get(config.game.name)
    params = config.game_params()
    act = LEARNERS[config.run.algo].actor(
        config, spec.obs_shape(params), spec.obs_dtype, spec.num_actions, state["model"]
    )
    return act, vars(params)

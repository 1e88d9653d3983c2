"""Checkpoints: written atomically, read with clear errors, loadable as a playing agent."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from fasttrain.config import ConfigError

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
    from fasttrain import config as cfg
    from fasttrain import games
    from fasttrain.policy import make_policy, make_q_network

    state = load(path)
    config = cfg.from_dict(cfg.tomllib.loads(state["config"]))
    if game is not None and game != config.game.name:
        raise ConfigError(f"checkpoint was trained on {config.game.name!r}, not {game!r}")
    spec = games.get(config.game.name)
    params = config.game_params()
    shape = spec.obs_shape(params)
    if config.run.algo == "dqn":
        dueling = config.learner("dqn").dueling
        policy = make_q_network(shape, spec.obs_dtype, spec.num_actions, config.model,
                                dueling=dueling)  # fmt: skip
    else:
        policy = make_policy(shape, spec.obs_dtype, spec.num_actions, config.model)
    policy.load_state_dict(state["model"])
    policy.eval()

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = policy(obs)  # PPO: (logits, values); DQN: Q-values
            return (out[0] if isinstance(out, tuple) else out).argmax(dim=1)

    return act, vars(params)

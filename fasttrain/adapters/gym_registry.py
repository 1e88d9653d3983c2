"""Gymnasium ids of fasttrain's single-agent games (``fasttrain/<Name>-v0``).

Kept apart from the adapter so registering imports neither torch nor Numba: the entry point is
the string ``fasttrain.adapters.gym:GymEnv``, loaded by ``gymnasium.make``.
"""

from __future__ import annotations

import gymnasium

_WORDS = {"cartpole": "CartPole", "minatar": "MinAtar"}


def gym_id(game: str) -> str:
    """Gymnasium id of a game: ``snake`` -> ``fasttrain/Snake-v0``, ``minatar-space_invaders``
    -> ``fasttrain/MinAtar-SpaceInvaders-v0``."""

    def word(part: str) -> str:
        return "".join(_WORDS.get(w, w[:1].upper() + w[1:]) for w in part.split("_"))

    return "fasttrain/" + "-".join(word(part) for part in game.split("-")) + "-v0"


def register_envs() -> list[str]:
    """Register every single-agent game with Gymnasium (``gym_id``); returns the ids. Safe to
    call again: ids already there are left alone."""
    from fasttrain.games import get, names

    ids = []
    for name in names():
        spec = get(name)
        if spec.agents(spec.make_params()) != 1:
            continue
        env_id = gym_id(name)
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id, entry_point="fasttrain.adapters.gym:GymEnv", kwargs={"game": name}
            )
        ids.append(env_id)
    return ids

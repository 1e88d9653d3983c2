"""fasttrain.games: the registry of games. Each game module defines a ``SPEC`` (a GameSpec)."""

from __future__ import annotations

import importlib

from fasttrain.kernels.spec import GameSpec, check_game_name

_BUILTIN = {
    "arena": "fasttrain.games.arena",
    "cartpole": "fasttrain.games.cartpole",
    "minatar-asterix": "fasttrain.games.minatar_asterix",
    "minatar-breakout": "fasttrain.games.minatar_breakout",
    "minatar-freeway": "fasttrain.games.minatar_freeway",
    "minatar-seaquest": "fasttrain.games.minatar_seaquest",
    "minatar-space_invaders": "fasttrain.games.minatar_space_invaders",
    "snake": "fasttrain.games.snake",
}
_REGISTRY: dict[str, GameSpec] = {}


def register(spec: GameSpec, overwrite: bool = False) -> GameSpec:
    """Add a game so ``fasttrain.make(spec.name, ...)`` finds it."""
    if not isinstance(spec, GameSpec):
        raise TypeError(f"register() takes a GameSpec, got {type(spec).__name__}")
    check_game_name(spec.name)  # again: a spec changed after creation must not name files
    if not overwrite and (spec.name in _BUILTIN or spec.name in _REGISTRY):
        existing = get(spec.name)
        if existing is not spec:
            raise ValueError(f"a game named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def names() -> list[str]:
    """Registered game names, sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def get(name: str) -> GameSpec:
    """The spec of game ``name``; unknown names raise ``ValueError`` listing the valid ones."""
    if name not in _REGISTRY:
        if name not in _BUILTIN:
            raise ValueError(f"unknown game {name!r}; valid: {', '.join(names())}")
        _REGISTRY[name] = importlib.import_module(_BUILTIN[name]).SPEC
    return _REGISTRY[name]

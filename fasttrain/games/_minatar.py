"""What the five MinAtar ports share: params, actions, sticky actions, the step's tail, pictures.

Every port follows ``minatar`` 1.0.15's ``Environment`` wrapper around its game:

- Actions: MinAtar's full set of 6, ``0 n, 1 l, 2 u, 3 r, 4 d, 5 f``; with ``minimal_action_set``
  the game's own minimal set (``MINIMAL_ACTIONS`` in each port), translated to the full set.
- Sticky actions: with probability ``sticky_action_prob`` (0.1) a step repeats the previous
  step's action instead of the one given (one ``rand_float`` draw at every step, first). The
  previous action (state ``last_action``) carries over into the next episode, as in MinAtar,
  whose ``Environment`` never resets it.
- Truncated: never, as in MinAtar, unless ``max_episode_steps`` > 0. Score: the return.
- Observation: MinAtar's ``(channels, 10, 10)`` uint8 screen in its channel order.
- State from a file: every field declares the range the game can put in it (``Field.low`` /
  ``high``) and a port's ``check_state`` the invariants its kernels rely on (a live entity's
  cell on the screen ...), so a checkpoint's values cannot index outside a buffer
  (``fasttrain/kernels/statecheck.py``). The bounds hold under any params: a curriculum changes
  params mid-episode, so a state from one stage must load under another.

A port defines its params (a subclass of ``MinAtarParams``), its state (with ``last_action`` and
``steps``), ``move(i, a, s, p) -> (reward, terminal)`` for a full-set action, ``write_obs``,
``reset_one`` and a four-line ``step_one``::

    def step_one(i, io, s, p):
        a = sticky_action(i, MINIMAL_ACTIONS, io, s, p)
        reward, terminal = move(i, a, s, p)
        end_step(i, reward, terminal, io, s, p)
        write_obs(i, io, s, p)

then ``SPEC = spec(...)`` and ``if __name__ == "__main__": main(SPEC)``.

Colour pictures: MinAtar's ``Environment.display_state`` colours a cell by the highest channel set
in it (channel ``c`` gets colour ``c + 1``; an empty cell is black), from seaborn's ``cubehelix``
palette of as many colours as the game has channels. That palette samples matplotlib's
``cubehelix`` colour map (D. A. Green's cube helix with gamma 1, start 0.5, rotations -1.5, hue 1)
at ``n`` evenly spaced points strictly inside [0, 1], from its 256-entry table. It is computed
here with NumPy, so neither seaborn nor matplotlib is needed; tests/fasttrain/games/test__minatar.py
checks it against matplotlib's map.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from fasttrain.kernels import Field, GameSpec, rand_float

SIZE = 10  # the screen is SIZE x SIZE cells
CELLS = SIZE * SIZE
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = 0, 1, 2, 3, 4, 5  # MinAtar's full action set
NUM_ACTIONS = 6


@dataclass(frozen=True)
class MinAtarParams:
    """What every MinAtar port takes; a port's params subclass it (its docstring and the field
    docstrings are its config.toml section)."""

    sticky_action_prob: float = 0.1
    """probability that a step repeats the previous action instead of the one given"""
    minimal_action_set: bool = False
    """the game's minimal action set instead of MinAtar's full 6"""
    max_episode_steps: int = 0
    """truncate episodes at this many steps (0: no limit, as in MinAtar)"""

    def __post_init__(self):
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.max_episode_steps < 0:
            raise ValueError("max_episode_steps must be >= 0 (0 means no limit)")


def scalar(p):
    """Per-environment shape of a one-number state array."""
    return ()


# the state every port keeps besides its own; ``steps`` only counts (high: the int32's own)
STATE = (
    Field(
        "last_action",
        scalar,
        np.int32,
        "() the previous step's action (full set)",
        low=0,
        high=FIRE,
    ),
    Field("steps", scalar, np.int32, "() steps in this episode", low=0),
)


def invariant_problem(name: str, values: np.ndarray, bad: np.ndarray, valid: str) -> str | None:
    """A port's ``check_state`` line for the first True of ``bad`` (same shape as ``values``,
    environments first): ``env 3: fish[2, 0] = 11; valid: ...``, or None when none is."""
    if not bad.any():
        return None
    flat = int(np.flatnonzero(bad)[0])
    where = np.unravel_index(flat, bad.shape)
    index = f"[{', '.join(str(int(k)) for k in where[1:])}]" if len(where) > 1 else ""
    value = values.reshape(-1)[flat].item()
    return f"env {int(where[0])}: {name}{index} = {value}; valid: {valid}"


# ------------------------------------------------------------------------------- step


def sticky_action(i, minimal_actions, io, s, p):
    """MinAtar's ``Environment.act`` before the game's: env ``i``'s action in the full set
    (``minimal_actions[action]`` with the minimal set), or, with probability
    ``sticky_action_prob``, the previous step's action; remembered for the next step."""
    a = io.actions[i]
    if p.minimal_action_set:
        a = minimal_actions[a]
    if rand_float(s.rng, i) < p.sticky_action_prob:
        a = s.last_action[i]
    s.last_action[i] = a
    return a


def end_step(i, reward, terminal, io, s, p):
    """The step's outputs: the reward (added to the score), ``terminal`` as terminated, and
    truncated at ``max_episode_steps`` unless it terminated."""
    s.steps[i] += 1
    io.rewards[i] = reward
    io.score[i] += reward
    io.terminated[i] = terminal
    io.truncated[i] = (not terminal) and 0 < p.max_episode_steps <= s.steps[i]


# ------------------------------------------------------------------------------- the spec


def spec(
    name, params_cls, state, num_channels, minimal_actions, reset_one, step_one, render_text, **more
):
    """The ``GameSpec`` of MinAtar's game ``name`` (registered as ``minatar-<name>``); ``more``
    goes to ``GameSpec`` as it is."""
    return GameSpec(
        name=f"minatar-{name}",
        params_cls=params_cls,
        state=(*state, *STATE),
        obs_shape=lambda p: (num_channels, SIZE, SIZE),
        obs_dtype=np.uint8,
        num_actions=lambda p: len(minimal_actions) if p.minimal_action_set else NUM_ACTIONS,
        reset_one=reset_one,
        step_one=step_one,
        render_text=render_text,
        render_rgb=render_rgb,
        **more,
    )


def main(spec: GameSpec) -> None:
    """A port's ``__main__``: its speed check, ``python -m fasttrain.games.<port> [envs]
    [steps]``."""
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(spec, spec.make_params(), sys.argv[1:])


# ------------------------------------------------------------------------------- pictures

# cubehelix's colour directions: (cos, sin) coefficients for red, green and blue
_HELIX = ((-0.14861, 1.78277), (-0.29227, -0.90649), (1.97294, 0.0))
_LUT_SIZE = 256  # matplotlib's default colour-map table


@functools.cache
def palette(num_channels: int) -> np.ndarray:
    """uint8 ``(num_channels + 1, 3)``: black, then channel ``c``'s colour at row ``c + 1``."""
    points = np.linspace(0.0, 1.0, num_channels + 2)[1:-1]
    index = np.minimum((points * _LUT_SIZE).astype(np.int64), _LUT_SIZE - 1)
    x = index / (_LUT_SIZE - 1)  # the table entry each point falls in
    amplitude = x * (1.0 - x) / 2.0
    phi = 2.0 * np.pi * (0.5 / 3.0 - 1.5 * x)
    rgb = np.stack([x + amplitude * (p0 * np.cos(phi) + p1 * np.sin(phi)) for p0, p1 in _HELIX])
    colours = np.clip(rgb.T, 0.0, 1.0)
    table = np.zeros((num_channels + 1, 3), dtype=np.uint8)
    table[1:] = np.round(colours * 255.0).astype(np.uint8)
    table.flags.writeable = False
    return table


def render_rgb(state, obs, params) -> np.ndarray:
    """uint8 ``(10, 10, 3)`` picture of one MinAtar observation ``(C, 10, 10)``, coloured as
    MinAtar's own display: each cell takes the colour of the highest channel set in it."""
    obs = np.asarray(obs)
    channels = obs.shape[0]
    weights = np.arange(1, channels + 1).reshape(channels, 1, 1)
    top = (obs.astype(np.int64) * weights).max(axis=0)
    return palette(channels)[top]

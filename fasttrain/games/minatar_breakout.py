"""MinAtar Breakout: bounce a ball off a paddle to break three rows of bricks.

A step-for-step port of ``minatar`` 1.0.15's ``breakout.py`` with its ``Environment`` wrapper
(sticky actions, actions, truncation and score as in every port: ``_minatar.py``), checked
against the package in tests/fasttrain/games/test_minatar_breakout.py.

Observation: uint8, shape ``(4, 10, 10)``, MinAtar's channels in its order:
    channel 0  paddle (on the bottom row)
    channel 1  ball
    channel 2  trail: where the ball was one step ago (shows its direction)
    channel 3  bricks
Actions: MinAtar's full set of 6 (only left and right move the paddle); with
    ``minimal_action_set = true``, 3 actions ``0 n, 1 l, 2 r``.
Start: paddle in column 4, three rows of bricks (rows 1-3), the ball on row 3 in column 0
    heading down-right or in column 9 heading down-left (one uniform draw).
Dynamics: the ball moves one cell diagonally per step; it reflects off the walls and the
    ceiling; hitting a brick removes it (+1), bounces back and blocks further brick hits until
    a step without one (MinAtar's ``strike`` flag); reaching the bottom row it bounces off the
    paddle when the paddle is under its old or its new column, else the episode ends. All three
    rows of bricks come back only when the ball reaches the bottom row with none left (MinAtar's
    quirk: the field can stay empty while the ball is in the air).
Rewards: +1 per brick. Terminated: the ball reaches the bottom row past the paddle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import (
    CELLS,
    LEFT,
    NOOP,
    RIGHT,
    SIZE,
    MinAtarParams,
    end_step,
    invariant_problem,
    main,
    scalar,
    spec,
    sticky_action,
)
from fasttrain.kernels import Field, rand_int

PADDLE, BALL, TRAIL, BRICK = 0, 1, 2, 3
NUM_CHANNELS = 4
MINIMAL_ACTIONS = (NOOP, LEFT, RIGHT)  # MinAtar's minimal_action_set() for Breakout
# ball directions: 0 up-left, 1 up-right, 2 down-right, 3 down-left
DX = (-1, 1, 1, -1)
DY = (-1, -1, 1, 1)


@dataclass(frozen=True)
class BreakoutParams(MinAtarParams):
    """Mirrors ``[game.minatar-breakout]`` in config.toml; defaults are MinAtar's."""

    minimal_action_set: bool = False
    """3 actions (no-op, left, right) instead of MinAtar's full 6"""


# Bounds: what the game keeps between steps. The ball never rests on the bottom row (it bounces
# back to the row it came from, or the episode ends and resets), so it always has a row to move
# to: ``bricks[new_y * SIZE + new_x]`` stays inside the array.
STATE = (
    Field("ball_x", scalar, np.int32, "() ball column", low=0, high=SIZE - 1),
    Field("ball_y", scalar, np.int32, "() ball row (never the bottom one)", low=0, high=SIZE - 2),
    Field(
        "ball_dir",
        scalar,
        np.int32,
        "() 0 up-left, 1 up-right, 2 down-right, 3 down-left",
        low=0,
        high=3,
    ),
    Field(
        "last_x", scalar, np.int32, "() ball column one step ago (the trail)", low=0, high=SIZE - 1
    ),
    Field("last_y", scalar, np.int32, "() ball row one step ago", low=0, high=SIZE - 2),
    Field("pos", scalar, np.int32, "() paddle column", low=0, high=SIZE - 1),
    Field("strike", scalar, np.uint8, "() 1 if the last step broke a brick", low=0, high=1),
    Field(
        "bricks",
        lambda p: (CELLS,),
        np.uint8,
        "(100,) 1 where a brick is, row-major",
        low=0,
        high=1,
    ),
)


def check_state(state, params):
    """No brick outside rows 1-3: one on the bottom row would let a ball that strikes it with
    ``strike`` set stay there, and its next move read past the end of ``bricks``."""
    bricks = state["bricks"]
    outside = bricks != 0
    outside[:, SIZE : 4 * SIZE] = False  # rows 1-3, where reset_one and move put them
    return invariant_problem("bricks", bricks, outside, "0 outside rows 1-3 (cells 10 to 39)")


# ------------------------------------------------------------------------------- sub-steps


def move(i, a, s, p):
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    if a == LEFT:
        s.pos[i] = max(0, s.pos[i] - 1)
    elif a == RIGHT:
        s.pos[i] = min(SIZE - 1, s.pos[i] + 1)
    s.last_x[i] = s.ball_x[i]
    s.last_y[i] = s.ball_y[i]
    d = s.ball_dir[i]
    new_x = s.ball_x[i] + DX[d]
    new_y = s.ball_y[i] + DY[d]
    reward = 0.0
    terminal = False
    strike_toggle = False
    if new_x < 0 or new_x > SIZE - 1:
        new_x = 0 if new_x < 0 else SIZE - 1
        d = (1, 0, 3, 2)[d]
    if new_y < 0:
        new_y = 0
        d = (3, 2, 1, 0)[d]
    elif s.bricks[i, new_y * SIZE + new_x] == 1:
        strike_toggle = True
        if s.strike[i] == 0:
            reward = 1.0
            s.strike[i] = 1
            s.bricks[i, new_y * SIZE + new_x] = 0
            new_y = s.last_y[i]
            d = (3, 2, 1, 0)[d]
    elif new_y == SIZE - 1:
        left = 0
        for k in range(CELLS):
            if s.bricks[i, k]:
                left += 1
        if left == 0:
            for k in range(SIZE, 4 * SIZE):  # rows 1-3
                s.bricks[i, k] = 1
        if s.ball_x[i] == s.pos[i]:
            d = (3, 2, 1, 0)[d]
            new_y = s.last_y[i]
        elif new_x == s.pos[i]:
            d = (2, 3, 0, 1)[d]
            new_y = s.last_y[i]
        else:
            terminal = True
    if not strike_toggle:
        s.strike[i] = 0
    s.ball_dir[i] = d
    s.ball_x[i] = new_x
    s.ball_y[i] = new_y
    return reward, terminal


def write_obs(i, io, s, p):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    obs = io.obs_flat
    for k in range(CELLS):
        obs[i, PADDLE * CELLS + k] = 0
        obs[i, BALL * CELLS + k] = 0
        obs[i, TRAIL * CELLS + k] = 0
        obs[i, BRICK * CELLS + k] = s.bricks[i, k]
    obs[i, BALL * CELLS + s.ball_y[i] * SIZE + s.ball_x[i]] = 1
    obs[i, PADDLE * CELLS + (SIZE - 1) * SIZE + s.pos[i]] = 1
    obs[i, TRAIL * CELLS + s.last_y[i] * SIZE + s.last_x[i]] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """MinAtar's ``Env.reset``: one draw picks the ball's side. ``last_action`` carries over."""
    start = rand_int(s.rng, i, 2)
    s.ball_y[i] = 3
    s.ball_x[i] = 0 if start == 0 else SIZE - 1
    s.ball_dir[i] = 2 if start == 0 else 3
    s.pos[i] = 4
    for k in range(CELLS):
        s.bricks[i, k] = 1 if SIZE <= k < 4 * SIZE else 0
    s.strike[i] = 0
    s.last_x[i] = s.ball_x[i]
    s.last_y[i] = s.ball_y[i]
    s.steps[i] = 0
    write_obs(i, io, s, p)


def step_one(i, io, s, p):
    """MinAtar's ``Environment.act``: the sticky-action draw, then the game's step."""
    a = sticky_action(i, MINIMAL_ACTIONS, io, s, p)
    reward, terminal = move(i, a, s, p)
    end_step(i, reward, terminal, io, s, p)
    write_obs(i, io, s, p)


# ------------------------------------------------------------------------------- render


def render_text(state, params) -> str:
    """The 10x10 screen: '#' brick, 'o' ball, '+' trail, '=' paddle, '.' empty."""
    rows = [["."] * SIZE for _ in range(SIZE)]
    bricks = state["bricks"]
    for k in range(CELLS):
        if bricks[k]:
            rows[k // SIZE][k % SIZE] = "#"
    rows[int(state["last_y"])][int(state["last_x"])] = "+"
    rows[SIZE - 1][int(state["pos"])] = "="
    rows[int(state["ball_y"])][int(state["ball_x"])] = "o"
    frame = "+" + "-" * SIZE + "+"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame])


SPEC = spec(
    "breakout",
    BreakoutParams,
    STATE,
    NUM_CHANNELS,
    MINIMAL_ACTIONS,
    reset_one,
    step_one,
    render_text,
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_breakout [envs] [steps]
    main(SPEC)

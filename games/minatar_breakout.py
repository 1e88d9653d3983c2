"""MinAtar Breakout: bounce a ball off a paddle to break three rows of bricks.

A step-for-step port of ``minatar`` 1.0.15's ``breakout.py`` with its ``Environment`` wrapper
(sticky actions), checked against the package in tests/games/test_minatar_breakout.py.

Observation: uint8, shape ``(4, 10, 10)``, MinAtar's channels in its order:
    channel 0  paddle (on the bottom row)
    channel 1  ball
    channel 2  trail: where the ball was one step ago (shows its direction)
    channel 3  bricks
Actions: MinAtar's full set of 6, ``0 n, 1 l, 2 u, 3 r, 4 d, 5 f`` (only left and right move the
    paddle); with ``minimal_action_set = true``, 3 actions ``0 n, 1 l, 2 r``.
Sticky actions: with probability ``sticky_action_prob`` (0.1) a step repeats the previous
    step's action instead of the one given. As in MinAtar the previous action carries over into
    the next episode (its ``Environment`` never resets it).
Start: paddle in column 4, three rows of bricks (rows 1-3), the ball on row 3 in column 0
    heading down-right or in column 9 heading down-left (one uniform draw).
Dynamics: the ball moves one cell diagonally per step; it reflects off the walls and the
    ceiling; hitting a brick removes it (+1), bounces back and blocks further brick hits until
    a step without one (MinAtar's ``strike`` flag); reaching the bottom row it bounces off the
    paddle when the paddle is under its old or its new column, else the episode ends. All three
    rows of bricks come back only when the ball reaches the bottom row with none left (MinAtar's
    quirk: the field can stay empty while the ball is in the air).
Rewards: +1 per brick. Terminated: the ball reaches the bottom row past the paddle.
Truncated: never, as in MinAtar, unless ``max_episode_steps`` > 0.
Score: bricks broken in the episode (equal to the return).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import render_rgb
from fasttrain.kernels import Field, GameSpec, rand_float, rand_int

SIZE = 10
CELLS = SIZE * SIZE
PADDLE, BALL, TRAIL, BRICK = 0, 1, 2, 3
NUM_CHANNELS = 4
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = 0, 1, 2, 3, 4, 5
MINIMAL_ACTIONS = (NOOP, LEFT, RIGHT)  # MinAtar's minimal_action_set() for Breakout
# ball directions: 0 up-left, 1 up-right, 2 down-right, 3 down-left
DX = (-1, 1, 1, -1)
DY = (-1, -1, 1, 1)


@dataclass(frozen=True)
class BreakoutParams:
    """Mirrors ``[game.minatar-breakout]`` in config.toml; defaults are MinAtar's."""

    sticky_action_prob: float = 0.1
    """probability that a step repeats the previous action instead of the one given"""
    minimal_action_set: bool = False
    """3 actions (no-op, left, right) instead of MinAtar's full 6"""
    max_episode_steps: int = 0
    """truncate episodes at this many steps (0: no limit, as in MinAtar)"""

    def __post_init__(self):
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.max_episode_steps < 0:
            raise ValueError("max_episode_steps must be >= 0 (0 means no limit)")


def _scalar(p):
    return ()


STATE = (
    Field("ball_x", _scalar, np.int32, "() ball column"),
    Field("ball_y", _scalar, np.int32, "() ball row"),
    Field("ball_dir", _scalar, np.int32, "() 0 up-left, 1 up-right, 2 down-right, 3 down-left"),
    Field("last_x", _scalar, np.int32, "() ball column one step ago (the trail)"),
    Field("last_y", _scalar, np.int32, "() ball row one step ago"),
    Field("pos", _scalar, np.int32, "() paddle column"),
    Field("strike", _scalar, np.uint8, "() 1 if the last step broke a brick"),
    Field("bricks", lambda p: (CELLS,), np.uint8, "(100,) 1 where a brick is, row-major"),
    Field("last_action", _scalar, np.int32, "() the previous step's action (full set)"),
    Field("steps", _scalar, np.int32, "() steps in this episode"),
)


# ------------------------------------------------------------------------------- sub-steps


def full_action(action, minimal_action_set):
    """The full-set action of ``action`` (MinAtar's minimal set maps 0, 1, 2 to n, l, r)."""
    if minimal_action_set and action == 2:
        return RIGHT
    return action


def move(i, a, ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, bricks):
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    if a == LEFT:
        pos[i] = max(0, pos[i] - 1)
    elif a == RIGHT:
        pos[i] = min(SIZE - 1, pos[i] + 1)
    last_x[i] = ball_x[i]
    last_y[i] = ball_y[i]
    d = ball_dir[i]
    new_x = ball_x[i] + DX[d]
    new_y = ball_y[i] + DY[d]
    reward = 0.0
    terminal = False
    strike_toggle = False
    if new_x < 0 or new_x > SIZE - 1:
        new_x = 0 if new_x < 0 else SIZE - 1
        d = (1, 0, 3, 2)[d]
    if new_y < 0:
        new_y = 0
        d = (3, 2, 1, 0)[d]
    elif bricks[i, new_y * SIZE + new_x] == 1:
        strike_toggle = True
        if strike[i] == 0:
            reward = 1.0
            strike[i] = 1
            bricks[i, new_y * SIZE + new_x] = 0
            new_y = last_y[i]
            d = (3, 2, 1, 0)[d]
    elif new_y == SIZE - 1:
        left = 0
        for k in range(CELLS):
            if bricks[i, k]:
                left += 1
        if left == 0:
            for k in range(SIZE, 4 * SIZE):  # rows 1-3
                bricks[i, k] = 1
        if ball_x[i] == pos[i]:
            d = (3, 2, 1, 0)[d]
            new_y = last_y[i]
        elif new_x == pos[i]:
            d = (2, 3, 0, 1)[d]
            new_y = last_y[i]
        else:
            terminal = True
    if not strike_toggle:
        strike[i] = 0
    ball_dir[i] = d
    ball_x[i] = new_x
    ball_y[i] = new_y
    return reward, terminal


def write_obs(i, obs_flat, ball_x, ball_y, last_x, last_y, pos, bricks):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    for k in range(CELLS):
        obs_flat[i, PADDLE * CELLS + k] = 0
        obs_flat[i, BALL * CELLS + k] = 0
        obs_flat[i, TRAIL * CELLS + k] = 0
        obs_flat[i, BRICK * CELLS + k] = bricks[i, k]
    obs_flat[i, BALL * CELLS + ball_y[i] * SIZE + ball_x[i]] = 1
    obs_flat[i, PADDLE * CELLS + (SIZE - 1) * SIZE + pos[i]] = 1
    obs_flat[i, TRAIL * CELLS + last_y[i] * SIZE + last_x[i]] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(
    i, obs_flat, rng, ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, bricks, steps
):
    """MinAtar's ``Env.reset``: one draw picks the ball's side. ``last_action`` carries over."""
    start = rand_int(rng, i, 2)
    ball_y[i] = 3
    ball_x[i] = 0 if start == 0 else SIZE - 1
    ball_dir[i] = 2 if start == 0 else 3
    pos[i] = 4
    for k in range(CELLS):
        bricks[i, k] = 1 if SIZE <= k < 4 * SIZE else 0
    strike[i] = 0
    last_x[i] = ball_x[i]
    last_y[i] = ball_y[i]
    steps[i] = 0
    write_obs(i, obs_flat, ball_x, ball_y, last_x, last_y, pos, bricks)


# one line per argument group: env index and I/O buffers, state arrays, params
def step_one(
    i, actions, obs_flat, rewards, terminated, truncated, rng, score,
    ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, bricks, last_action, steps,
    sticky_action_prob, minimal_action_set, max_episode_steps,
):  # fmt: skip
    """MinAtar's ``Environment.act``: the sticky-action draw, then the game's step."""
    a = full_action(actions[i], minimal_action_set)
    if rand_float(rng, i) < sticky_action_prob:
        a = last_action[i]
    last_action[i] = a
    reward, terminal = move(i, a, ball_x, ball_y, ball_dir, last_x, last_y, pos, strike, bricks)
    steps[i] += 1
    rewards[i] = reward
    score[i] += reward
    terminated[i] = terminal
    truncated[i] = (not terminal) and 0 < max_episode_steps <= steps[i]
    write_obs(i, obs_flat, ball_x, ball_y, last_x, last_y, pos, bricks)


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


SPEC = GameSpec(
    name="minatar-breakout",
    params_cls=BreakoutParams,
    state=STATE,
    obs_shape=lambda p: (NUM_CHANNELS, SIZE, SIZE),
    obs_dtype=np.uint8,
    num_actions=lambda p: len(MINIMAL_ACTIONS) if p.minimal_action_set else 6,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_breakout [envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, BreakoutParams(), sys.argv[1:])

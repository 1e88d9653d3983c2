"""MinAtar Freeway: a chicken crosses eight lanes of traffic, as often as it can in 2500 steps.

A step-for-step port of ``minatar`` 1.0.15's ``freeway.py`` with its ``Environment`` wrapper
(sticky actions, actions, truncation and score as in every port: ``_minatar.py``), checked
against the package in tests/fasttrain/games/test_minatar_freeway.py.

Observation: uint8, shape ``(7, 10, 10)``, MinAtar's channels in its order:
    channel 0      chicken (always in column 4)
    channel 1      cars (one per lane, lanes on rows 1-8)
    channels 2-6   a car's trail, the cell behind it: the channel says how often the car moves
                   (channel 2: every step ... channel 6: every 5th step), the side its direction
Actions: MinAtar's full set of 6 (only up and down move the chicken); with
    ``minimal_action_set = true``, 3 actions ``0 n, 1 u, 2 d``.
Start: the chicken on row 9; every car in column 0 of its lane, with a speed of 1-5 steps per
    move and a random direction (8 speed draws, then 8 direction draws).
Dynamics: the chicken moves one row at most every 3rd step (a move starts a 3-step cooldown).
    Reaching row 0 scores +1, sends the chicken back to row 9 and draws new speeds and
    directions for all cars (they keep their columns). Each car then moves one column when its
    timer runs out, wrapping around the edges; a car in the chicken's cell, before or after
    it moves, sends the chicken back to row 9 (no other penalty).
Rewards: +1 per crossing. Terminated: MinAtar's time limit, after 2501 steps (its timer starts
    at 2500 and the episode ends when it drops below 0). It is MinAtar's ``terminal``, so it
    is ``terminated`` here, not ``truncated``: every episode has the same length.
Truncated: never, unless ``max_episode_steps`` > 0 (and below 2501).
No difficulty ramping: MinAtar's Freeway ignores ``difficulty_ramping``, so there is no
    ``ramping`` param.
Quirk not kept: MinAtar draws a car's direction as ``sign(u - 0.5)``, which is 0 (a car that
    never shows a trail, and crashes MinAtar's ``state()``) when ``u`` is exactly 0.5; here that
    draw counts as leftward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import (
    CELLS,
    DOWN,
    NOOP,
    SIZE,
    UP,
    MinAtarParams,
    end_step,
    invariant_problem,
    main,
    scalar,
    spec,
    sticky_action,
)
from fasttrain.kernels import Field, rand_float, rand_int

CHICKEN, CAR, SPEED1 = 0, 1, 2  # speed k's trail is channel SPEED1 + k - 1
NUM_CHANNELS = 7
NUM_CARS = 8  # car k drives on row k + 1
CHICKEN_COLUMN = 4
PLAYER_SPEED = 3  # steps between two chicken moves
TIME_LIMIT = 2500
MINIMAL_ACTIONS = (NOOP, UP, DOWN)  # MinAtar's minimal_action_set() for Freeway


@dataclass(frozen=True)
class FreewayParams(MinAtarParams):
    """Mirrors ``[game.minatar-freeway]`` in config.toml; defaults are MinAtar's."""

    minimal_action_set: bool = False
    """3 actions (no-op, up, down) instead of MinAtar's full 6"""
    max_episode_steps: int = 0
    """truncate episodes at this many steps (0: none; MinAtar's own limit ends them at 2501)"""


def _cars(p):
    return (NUM_CARS,)


MAX_SPEED = 5  # a car moves every 1 to 5 steps: |car_speed| indexes its trail's channel
# Bounds: what the game keeps between steps. Row 0 is never kept (reaching it scores and sends
# the chicken back to row 9); the countdown ends the episode below 0.
STATE = (
    Field("pos", scalar, np.int32, "() chicken row", low=1, high=SIZE - 1),
    Field(
        "move_timer",
        scalar,
        np.int32,
        "() steps until the chicken may move again",
        low=0,
        high=PLAYER_SPEED,
    ),
    Field(
        "terminate_timer",
        scalar,
        np.int32,
        "() MinAtar's time limit countdown",
        low=0,
        high=TIME_LIMIT,
    ),
    Field(
        "car_x",
        _cars,
        np.int32,
        "(8,) column of the car in lane k (row k + 1)",
        low=0,
        high=SIZE - 1,
    ),
    Field("car_timer", _cars, np.int32, "(8,) steps until the car moves", low=0, high=MAX_SPEED),
    Field(
        "car_speed",
        _cars,
        np.int32,
        "(8,) steps per move, signed: + right, - left (never 0)",
        low=-MAX_SPEED,
        high=MAX_SPEED,
    ),
)


def check_state(state, params):
    """No car with speed 0: ``|car_speed|`` picks the channel of the car's trail (speed k's is
    channel ``SPEED1 + k - 1``), and 0 would mark the cars' channel instead."""
    speed = state["car_speed"]
    return invariant_problem("car_speed", speed, speed == 0, "-5 to -1 or 1 to 5")


# ------------------------------------------------------------------------------- sub-steps


def randomize_cars(i, s):
    """MinAtar's ``_randomize_cars``: 8 speeds in 1-5, then 8 directions."""
    for k in range(NUM_CARS):
        s.car_speed[i, k] = 1 + rand_int(s.rng, i, 5)
    for k in range(NUM_CARS):
        if rand_float(s.rng, i) <= 0.5:
            s.car_speed[i, k] = -s.car_speed[i, k]
        s.car_timer[i, k] = abs(s.car_speed[i, k])


def move(i, a, s, p):
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    if a == UP and s.move_timer[i] == 0:
        s.move_timer[i] = PLAYER_SPEED
        s.pos[i] = max(0, s.pos[i] - 1)
    elif a == DOWN and s.move_timer[i] == 0:
        s.move_timer[i] = PLAYER_SPEED
        s.pos[i] = min(SIZE - 1, s.pos[i] + 1)
    reward = 0.0
    if s.pos[i] == 0:
        reward = 1.0
        randomize_cars(i, s)
        s.pos[i] = SIZE - 1
    for k in range(NUM_CARS):
        if s.car_x[i, k] == CHICKEN_COLUMN and k + 1 == s.pos[i]:
            s.pos[i] = SIZE - 1
        if s.car_timer[i, k] == 0:
            s.car_timer[i, k] = abs(s.car_speed[i, k])
            x = s.car_x[i, k] + (1 if s.car_speed[i, k] > 0 else -1)
            if x < 0:
                x = SIZE - 1
            elif x > SIZE - 1:
                x = 0
            s.car_x[i, k] = x
            if x == CHICKEN_COLUMN and k + 1 == s.pos[i]:
                s.pos[i] = SIZE - 1
        else:
            s.car_timer[i, k] -= 1
    if s.move_timer[i] > 0:
        s.move_timer[i] -= 1
    s.terminate_timer[i] -= 1
    return reward, s.terminate_timer[i] < 0


def write_obs(i, io, s, p):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    obs = io.obs_flat
    for k in range(NUM_CHANNELS * CELLS):
        obs[i, k] = 0
    obs[i, CHICKEN * CELLS + s.pos[i] * SIZE + CHICKEN_COLUMN] = 1
    for k in range(NUM_CARS):
        x = s.car_x[i, k]
        row = (k + 1) * SIZE
        obs[i, CAR * CELLS + row + x] = 1
        speed = s.car_speed[i, k]
        back = x - 1 if speed > 0 else x + 1
        if back < 0:
            back = SIZE - 1
        elif back > SIZE - 1:
            back = 0
        obs[i, (SPEED1 + abs(speed) - 1) * CELLS + row + back] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """MinAtar's ``Env.reset``: new cars, the chicken at the bottom. ``last_action`` carries
    over."""
    randomize_cars(i, s)
    for k in range(NUM_CARS):
        s.car_x[i, k] = 0
    s.pos[i] = SIZE - 1
    s.move_timer[i] = PLAYER_SPEED
    s.terminate_timer[i] = TIME_LIMIT
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
    """The 10x10 screen: 'C' chicken, '>' / '<' a car and its direction, the digit 1-5 behind
    it its steps per move, '.' empty."""
    rows = [["."] * SIZE for _ in range(SIZE)]
    for k in range(NUM_CARS):
        x, speed = int(state["car_x"][k]), int(state["car_speed"][k])
        back = (x - 1 if speed > 0 else x + 1) % SIZE
        rows[k + 1][back] = str(abs(speed))
        rows[k + 1][x] = ">" if speed > 0 else "<"
    rows[int(state["pos"])][CHICKEN_COLUMN] = "C"
    frame = "+" + "-" * SIZE + "+"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame])


SPEC = spec(
    "freeway",
    FreewayParams,
    STATE,
    NUM_CHANNELS,
    MINIMAL_ACTIONS,
    reset_one,
    step_one,
    render_text,
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_freeway [envs] [steps]
    main(SPEC)

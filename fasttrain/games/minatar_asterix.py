"""MinAtar Asterix: dodge enemies and collect gold as they cross the screen's eight lanes.

A step-for-step port of ``minatar`` 1.0.15's ``asterix.py`` with its ``Environment`` wrapper
(sticky actions, actions, truncation and score as in every port: ``_minatar.py``), checked
against the package in tests/fasttrain/games/test_minatar_asterix.py.

Observation: uint8, shape ``(4, 10, 10)``, MinAtar's channels in its order:
    channel 0  player
    channel 1  enemies
    channel 2  trail: the cell behind each enemy or gold (shows its direction)
    channel 3  gold
Actions: MinAtar's full set of 6 (fire does nothing); with ``minimal_action_set = true``, 5
    actions ``0 n, 1 l, 2 u, 3 r, 4 d``.
Start: the player at row 5, column 5; no entities. Every lane (rows 1-8) holds at most one
    entity: MinAtar's 8 slots.
Dynamics, in MinAtar's order: when the spawn timer is up, a new entity, enemy or (one in three)
    gold, enters at the left edge moving right or at the right edge moving left (two draws),
    in a lane drawn among the free ones (a third draw; with no free lane nothing spawns, after
    the two draws). The player moves one cell (rows 1-8). The player touching gold collects it
    (+1, the gold disappears); touching an enemy ends the episode. Every ``move_speed`` steps
    all entities move one column (leaving at the edges), and the touches are checked again.
Ramping (``ramping``): every 101 steps the spawn interval drops by one (from 10 down to 1)
    and every other time the move interval too (from 5 down to 1).
Rewards: +1 per gold. Terminated: an enemy touches the player. As in MinAtar the step that
    ends the episode still moves and scores the other entities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import (
    CELLS,
    DOWN,
    LEFT,
    NOOP,
    RIGHT,
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

PLAYER, ENEMY, TRAIL, GOLD = 0, 1, 2, 3
NUM_CHANNELS = 4
NUM_SLOTS = 8  # slot k is the lane on row k + 1
ACTIVE, X, RIGHTWARD, IS_GOLD = 0, 1, 2, 3  # columns of the entities array
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
MAX_RAMPS = INIT_SPAWN_SPEED - 1  # ramping stops when both speeds reach 1: after 9 ramps
MINIMAL_ACTIONS = (NOOP, LEFT, UP, RIGHT, DOWN)  # MinAtar's minimal_action_set() for Asterix


@dataclass(frozen=True)
class AsterixParams(MinAtarParams):
    """Mirrors ``[game.minatar-asterix]`` in config.toml; defaults are MinAtar's."""

    minimal_action_set: bool = False
    """5 actions (no-op, left, up, right, down) instead of MinAtar's full 6"""
    ramping: bool = True
    """entities spawn and move faster over time (MinAtar's difficulty_ramping)"""


# Bounds: what the game keeps between steps. An entity that leaves the screen is switched off
# where it stepped (column -1 or 10); an active one is on the screen (check_state).
STATE = (
    Field("player_x", scalar, np.int32, "() player column", low=0, high=SIZE - 1),
    Field("player_y", scalar, np.int32, "() player row (1-8)", low=1, high=NUM_SLOTS),
    Field(
        "spawn_speed",
        scalar,
        np.int32,
        "() steps between spawns (10, ramps to 1)",
        low=1,
        high=INIT_SPAWN_SPEED,
    ),
    Field(
        "spawn_timer",
        scalar,
        np.int32,
        "() steps until the next spawn",
        low=0,
        high=INIT_SPAWN_SPEED,
    ),
    Field(
        "move_speed",
        scalar,
        np.int32,
        "() steps between entity moves (5, ramps to 1)",
        low=1,
        high=INIT_MOVE_INTERVAL,
    ),
    Field(
        "move_timer",
        scalar,
        np.int32,
        "() steps until the entities move",
        low=0,
        high=INIT_MOVE_INTERVAL,
    ),
    Field(
        "ramp_timer",
        scalar,
        np.int32,
        "() steps until the next ramp (-1: ramp now)",
        low=-1,
        high=RAMP_INTERVAL,
    ),
    Field("ramp_index", scalar, np.int32, "() ramps so far", low=0, high=MAX_RAMPS),
    Field(
        "entities",
        lambda p: (NUM_SLOTS, 4),
        np.int32,
        "(8, 4) per lane: active, column, moving right, gold",
        low=-1,
        high=SIZE,
    ),
)


def check_state(state, params):
    """Every lane's flags are 0 or 1 and an active entity's column is on the screen (its cell
    is written into the observation)."""
    entities = state["entities"]  # (num_envs, 8, 4)
    flag = np.zeros(entities.shape, dtype=bool)
    flag[..., [ACTIVE, RIGHTWARD, IS_GOLD]] = True
    bad = flag & ((entities < 0) | (entities > 1))
    valid = "0 or 1 in columns 0 (active), 2 (moving right) and 3 (gold)"
    problem = invariant_problem("entities", entities, bad, valid)
    if problem:
        return problem
    off = np.zeros(entities.shape, dtype=bool)
    off[..., X] = (entities[..., ACTIVE] == 1) & (
        (entities[..., X] < 0) | (entities[..., X] >= SIZE)
    )
    return invariant_problem("entities", entities, off, "0 to 9 in column 1 of an active lane")


# ------------------------------------------------------------------------------- sub-steps


def spawn(i, s):
    """MinAtar's ``_spawn_entity``: direction and kind drawn first, then a free lane."""
    rightward = rand_float(s.rng, i) < 0.5
    gold = rand_float(s.rng, i) < 1.0 / 3.0
    free = 0
    for k in range(NUM_SLOTS):
        if s.entities[i, k, ACTIVE] == 0:
            free += 1
    if free == 0:
        return
    pick = rand_int(s.rng, i, free)
    for k in range(NUM_SLOTS):
        if s.entities[i, k, ACTIVE] == 0:
            if pick == 0:
                s.entities[i, k, ACTIVE] = 1
                s.entities[i, k, X] = 0 if rightward else SIZE - 1
                s.entities[i, k, RIGHTWARD] = 1 if rightward else 0
                s.entities[i, k, IS_GOLD] = 1 if gold else 0
                return
            pick -= 1


def touch(i, k, s):
    """The player and lane ``k``'s entity in one cell: returns (reward, terminal)."""
    if s.entities[i, k, X] == s.player_x[i] and k + 1 == s.player_y[i]:
        if s.entities[i, k, IS_GOLD]:
            s.entities[i, k, ACTIVE] = 0
            return 1.0, False
        return 0.0, True
    return 0.0, False


def move(i, a, s, p):
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    if s.spawn_timer[i] == 0:
        spawn(i, s)
        s.spawn_timer[i] = s.spawn_speed[i]
    if a == LEFT:
        s.player_x[i] = max(0, s.player_x[i] - 1)
    elif a == RIGHT:
        s.player_x[i] = min(SIZE - 1, s.player_x[i] + 1)
    elif a == UP:
        s.player_y[i] = max(1, s.player_y[i] - 1)
    elif a == DOWN:
        s.player_y[i] = min(NUM_SLOTS, s.player_y[i] + 1)
    reward = 0.0
    terminal = False
    for k in range(NUM_SLOTS):
        if s.entities[i, k, ACTIVE]:
            r, t = touch(i, k, s)
            reward += r
            terminal = terminal or t
    if s.move_timer[i] == 0:
        s.move_timer[i] = s.move_speed[i]
        for k in range(NUM_SLOTS):
            if s.entities[i, k, ACTIVE]:
                x = s.entities[i, k, X] + (1 if s.entities[i, k, RIGHTWARD] else -1)
                s.entities[i, k, X] = x
                if x < 0 or x > SIZE - 1:
                    s.entities[i, k, ACTIVE] = 0
                else:
                    r, t = touch(i, k, s)
                    reward += r
                    terminal = terminal or t
    s.spawn_timer[i] -= 1
    s.move_timer[i] -= 1
    if p.ramping and (s.spawn_speed[i] > 1 or s.move_speed[i] > 1):
        if s.ramp_timer[i] >= 0:
            s.ramp_timer[i] -= 1
        else:
            if s.move_speed[i] > 1 and s.ramp_index[i] % 2:
                s.move_speed[i] -= 1
            if s.spawn_speed[i] > 1:
                s.spawn_speed[i] -= 1
            s.ramp_index[i] += 1
            s.ramp_timer[i] = RAMP_INTERVAL
    return reward, terminal


def write_obs(i, io, s, p):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    obs = io.obs_flat
    for k in range(NUM_CHANNELS * CELLS):
        obs[i, k] = 0
    obs[i, PLAYER * CELLS + s.player_y[i] * SIZE + s.player_x[i]] = 1
    for k in range(NUM_SLOTS):
        if s.entities[i, k, ACTIVE]:
            x = s.entities[i, k, X]
            row = (k + 1) * SIZE
            channel = GOLD if s.entities[i, k, IS_GOLD] else ENEMY
            obs[i, channel * CELLS + row + x] = 1
            back = x - 1 if s.entities[i, k, RIGHTWARD] else x + 1
            if 0 <= back <= SIZE - 1:
                obs[i, TRAIL * CELLS + row + back] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    s.player_x[i] = 5
    s.player_y[i] = 5
    for k in range(NUM_SLOTS):
        for j in range(4):
            s.entities[i, k, j] = 0
    s.spawn_speed[i] = INIT_SPAWN_SPEED
    s.spawn_timer[i] = INIT_SPAWN_SPEED
    s.move_speed[i] = INIT_MOVE_INTERVAL
    s.move_timer[i] = INIT_MOVE_INTERVAL
    s.ramp_timer[i] = RAMP_INTERVAL
    s.ramp_index[i] = 0
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
    """The 10x10 screen: 'P' player, 'E' enemy, '$' gold, '-' the trail behind them, '.'
    empty."""
    rows = [["."] * SIZE for _ in range(SIZE)]
    for k in range(NUM_SLOTS):
        active, x, rightward, gold = (int(v) for v in state["entities"][k])
        if active:
            back = x - 1 if rightward else x + 1
            if 0 <= back < SIZE:
                rows[k + 1][back] = "-"
            rows[k + 1][x] = "$" if gold else "E"
    rows[int(state["player_y"])][int(state["player_x"])] = "P"
    frame = "+" + "-" * SIZE + "+"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame])


SPEC = spec(
    "asterix",
    AsterixParams,
    STATE,
    NUM_CHANNELS,
    MINIMAL_ACTIONS,
    reset_one,
    step_one,
    render_text,
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_asterix [envs] [steps]
    main(SPEC)

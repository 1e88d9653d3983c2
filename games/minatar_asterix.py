"""MinAtar Asterix: dodge enemies and collect gold as they cross the screen's eight lanes.

A step-for-step port of ``minatar`` 1.0.15's ``asterix.py`` with its ``Environment`` wrapper
(sticky actions), checked against the package in tests/games/test_minatar_asterix.py.

Observation: uint8, shape ``(4, 10, 10)``, MinAtar's channels in its order:
    channel 0  player
    channel 1  enemies
    channel 2  trail: the cell behind each enemy or gold (shows its direction)
    channel 3  gold
Actions: MinAtar's full set of 6, ``0 n, 1 l, 2 u, 3 r, 4 d, 5 f`` (fire does nothing); with
    ``minimal_action_set = true``, 5 actions ``0 n, 1 l, 2 u, 3 r, 4 d``.
Sticky actions: with probability ``sticky_action_prob`` (0.1) a step repeats the previous
    step's action instead of the one given; the previous action carries over into the next
    episode, as in MinAtar (its ``Environment`` never resets it).
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
Truncated: never, as in MinAtar, unless ``max_episode_steps`` > 0.
Score: gold collected in the episode (equal to the return).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import render_rgb
from fasttrain.kernels import Field, GameSpec, rand_float, rand_int

SIZE = 10
CELLS = SIZE * SIZE
PLAYER, ENEMY, TRAIL, GOLD = 0, 1, 2, 3
NUM_CHANNELS = 4
NUM_SLOTS = 8  # slot k is the lane on row k + 1
ACTIVE, X, RIGHTWARD, IS_GOLD = 0, 1, 2, 3  # columns of the entities array
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = 0, 1, 2, 3, 4, 5
MINIMAL_ACTIONS = (NOOP, LEFT, UP, RIGHT, DOWN)  # MinAtar's minimal_action_set() for Asterix


@dataclass(frozen=True)
class AsterixParams:
    """Mirrors ``[game.minatar-asterix]`` in config.toml; defaults are MinAtar's."""

    sticky_action_prob: float = 0.1
    """probability that a step repeats the previous action instead of the one given"""
    minimal_action_set: bool = False
    """5 actions (no-op, left, up, right, down) instead of MinAtar's full 6"""
    ramping: bool = True
    """entities spawn and move faster over time (MinAtar's difficulty_ramping)"""
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
    Field("player_x", _scalar, np.int32, "() player column"),
    Field("player_y", _scalar, np.int32, "() player row (1-8)"),
    Field("spawn_speed", _scalar, np.int32, "() steps between spawns (10, ramps to 1)"),
    Field("spawn_timer", _scalar, np.int32, "() steps until the next spawn"),
    Field("move_speed", _scalar, np.int32, "() steps between entity moves (5, ramps to 1)"),
    Field("move_timer", _scalar, np.int32, "() steps until the entities move"),
    Field("ramp_timer", _scalar, np.int32, "() steps until the next ramp"),
    Field("ramp_index", _scalar, np.int32, "() ramps so far"),
    Field(
        "entities",
        lambda p: (NUM_SLOTS, 4),
        np.int32,
        "(8, 4) per lane: active, column, moving right, gold",
    ),
    Field("last_action", _scalar, np.int32, "() the previous step's action (full set)"),
    Field("steps", _scalar, np.int32, "() steps in this episode"),
)


# ------------------------------------------------------------------------------- sub-steps


def full_action(action, minimal_action_set):
    """The full-set action of ``action`` (the minimal set is n, l, u, r, d: the same indices)."""
    return action


def spawn(i, rng, entities):
    """MinAtar's ``_spawn_entity``: direction and kind drawn first, then a free lane."""
    rightward = rand_float(rng, i) < 0.5
    gold = rand_float(rng, i) < 1.0 / 3.0
    free = 0
    for k in range(NUM_SLOTS):
        if entities[i, k, ACTIVE] == 0:
            free += 1
    if free == 0:
        return
    pick = rand_int(rng, i, free)
    for k in range(NUM_SLOTS):
        if entities[i, k, ACTIVE] == 0:
            if pick == 0:
                entities[i, k, ACTIVE] = 1
                entities[i, k, X] = 0 if rightward else SIZE - 1
                entities[i, k, RIGHTWARD] = 1 if rightward else 0
                entities[i, k, IS_GOLD] = 1 if gold else 0
                return
            pick -= 1


def touch(i, k, player_x, player_y, entities):
    """The player and lane ``k``'s entity in one cell: returns (reward, terminal)."""
    if entities[i, k, X] == player_x[i] and k + 1 == player_y[i]:
        if entities[i, k, IS_GOLD]:
            entities[i, k, ACTIVE] = 0
            return 1.0, False
        return 0.0, True
    return 0.0, False


def move(
    i, a, rng, player_x, player_y, spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer,
    ramp_index, entities, ramping,
):  # fmt: skip
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    if spawn_timer[i] == 0:
        spawn(i, rng, entities)
        spawn_timer[i] = spawn_speed[i]
    if a == LEFT:
        player_x[i] = max(0, player_x[i] - 1)
    elif a == RIGHT:
        player_x[i] = min(SIZE - 1, player_x[i] + 1)
    elif a == UP:
        player_y[i] = max(1, player_y[i] - 1)
    elif a == DOWN:
        player_y[i] = min(NUM_SLOTS, player_y[i] + 1)
    reward = 0.0
    terminal = False
    for k in range(NUM_SLOTS):
        if entities[i, k, ACTIVE]:
            r, t = touch(i, k, player_x, player_y, entities)
            reward += r
            terminal = terminal or t
    if move_timer[i] == 0:
        move_timer[i] = move_speed[i]
        for k in range(NUM_SLOTS):
            if entities[i, k, ACTIVE]:
                x = entities[i, k, X] + (1 if entities[i, k, RIGHTWARD] else -1)
                entities[i, k, X] = x
                if x < 0 or x > SIZE - 1:
                    entities[i, k, ACTIVE] = 0
                else:
                    r, t = touch(i, k, player_x, player_y, entities)
                    reward += r
                    terminal = terminal or t
    spawn_timer[i] -= 1
    move_timer[i] -= 1
    if ramping and (spawn_speed[i] > 1 or move_speed[i] > 1):
        if ramp_timer[i] >= 0:
            ramp_timer[i] -= 1
        else:
            if move_speed[i] > 1 and ramp_index[i] % 2:
                move_speed[i] -= 1
            if spawn_speed[i] > 1:
                spawn_speed[i] -= 1
            ramp_index[i] += 1
            ramp_timer[i] = RAMP_INTERVAL
    return reward, terminal


def write_obs(i, obs_flat, player_x, player_y, entities):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    for k in range(NUM_CHANNELS * CELLS):
        obs_flat[i, k] = 0
    obs_flat[i, PLAYER * CELLS + player_y[i] * SIZE + player_x[i]] = 1
    for k in range(NUM_SLOTS):
        if entities[i, k, ACTIVE]:
            x = entities[i, k, X]
            row = (k + 1) * SIZE
            channel = GOLD if entities[i, k, IS_GOLD] else ENEMY
            obs_flat[i, channel * CELLS + row + x] = 1
            back = x - 1 if entities[i, k, RIGHTWARD] else x + 1
            if 0 <= back <= SIZE - 1:
                obs_flat[i, TRAIL * CELLS + row + back] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(
    i, obs_flat, player_x, player_y, spawn_speed, spawn_timer, move_speed, move_timer,
    ramp_timer, ramp_index, entities, steps,
):  # fmt: skip
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    player_x[i] = 5
    player_y[i] = 5
    for k in range(NUM_SLOTS):
        for j in range(4):
            entities[i, k, j] = 0
    spawn_speed[i] = INIT_SPAWN_SPEED
    spawn_timer[i] = INIT_SPAWN_SPEED
    move_speed[i] = INIT_MOVE_INTERVAL
    move_timer[i] = INIT_MOVE_INTERVAL
    ramp_timer[i] = RAMP_INTERVAL
    ramp_index[i] = 0
    steps[i] = 0
    write_obs(i, obs_flat, player_x, player_y, entities)


# one line per argument group: env index and I/O buffers, state arrays, params
def step_one(
    i, actions, obs_flat, rewards, terminated, truncated, rng, score,
    player_x, player_y, spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer, ramp_index,
    entities, last_action, steps,
    sticky_action_prob, minimal_action_set, ramping, max_episode_steps,
):  # fmt: skip
    """MinAtar's ``Environment.act``: the sticky-action draw, then the game's step."""
    a = full_action(actions[i], minimal_action_set)
    if rand_float(rng, i) < sticky_action_prob:
        a = last_action[i]
    last_action[i] = a
    reward, terminal = move(
        i, a, rng, player_x, player_y, spawn_speed, spawn_timer, move_speed, move_timer,
        ramp_timer, ramp_index, entities, ramping,
    )  # fmt: skip
    steps[i] += 1
    rewards[i] = reward
    score[i] += reward
    terminated[i] = terminal
    truncated[i] = (not terminal) and 0 < max_episode_steps <= steps[i]
    write_obs(i, obs_flat, player_x, player_y, entities)


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


SPEC = GameSpec(
    name="minatar-asterix",
    params_cls=AsterixParams,
    state=STATE,
    obs_shape=lambda p: (NUM_CHANNELS, SIZE, SIZE),
    obs_dtype=np.uint8,
    num_actions=lambda p: len(MINIMAL_ACTIONS) if p.minimal_action_set else 6,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_asterix [envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, AsterixParams(), sys.argv[1:])

"""MinAtar Seaquest: a submarine shoots fish and enemy subs, rescues divers and surfaces for air.

A step-for-step port of ``minatar`` 1.0.15's ``seaquest.py`` with its ``Environment`` wrapper
(sticky actions, actions, truncation and score as in every port: ``_minatar.py``), checked
against the package in tests/fasttrain/games/test_minatar_seaquest.py.

Observation: uint8, shape ``(10, 10, 10)``, MinAtar's channels in its order:
    channel 0  the submarine's front        channel 5  enemy fish
    channel 1  the submarine's back         channel 6  enemy subs
    channel 2  the submarine's bullets      channel 7  oxygen gauge (bottom row, from the left)
    channel 3  trail: the cell behind       channel 8  divers gauge (bottom row, ending at
               each fish, sub and diver                column 8)
    channel 4  enemy bullets                channel 9  divers
Actions: MinAtar's full set of 6; its minimal set is the same 6 actions, so
    ``minimal_action_set`` changes nothing here (kept for a uniform interface).
Start: the submarine on the surface (row 0), column 5, facing left; 200 oxygen, no divers.
Dynamics, in MinAtar's order: an enemy spawns every ``e_spawn_speed`` steps (20, ramping to 1):
    direction and kind (a sub one time in three) drawn, then a row in 1-8, and nothing spawns
    if an enemy in that row moves the other way; a diver spawns every 30 steps. The action fires
    (a bullet, then a 5-step cooldown) or moves (rows 0-8). Bullets move a column per step,
    killing the first fish, else the first sub, in their cell (+1 each). Divers move every 6th
    step and join the submarine on contact while it holds fewer than 6. Enemy subs and fish move
    every ``move_speed + 1`` steps (5, ramping to 2), end the episode on contact, die on a
    bullet (+1); each sub fires every 11th step. Enemy bullets move a column per step.
    Oxygen drops by one per step below the surface; at 0 the episode ends. Coming up to the
    surface with no diver ends the episode; with 1-5 divers it costs one and refills the
    oxygen; with 6 it refills the oxygen and scores ``oxygen * 10 // 200``. Each surfacing
    ramps the difficulty (``ramping``): spawns faster, every other time enemies move faster.
Quirks kept (MinAtar's, all checked by the parity tests):
    - surfacing with 6 divers sets the count to 0 and then takes one more, leaving -1: the
      divers gauge then shows nothing, and later surfacings without divers do not end the
      episode (each takes the count further down) until rescued divers bring it back to 0;
    - a sub that leaves the screen or is shot in a step still fires that step if its shot timer
      is up (its bullet leaves the screen at once when it was off it);
    - the step that ends the episode still scores what it scores (kills, a surfacing).
    Lists become fixed-capacity arrays in MinAtar's order (spawn order, removals shifting the
    rest); its loops run from the newest entity to the oldest, as ``reversed(list)`` does.
Capacities (bounds of what play can reach): a fish or sub lives at most 10 moves x 3 steps
    after the ramp ends, and at most one spawns per step, so <= 31 of each; enemy bullets <= 40;
    the submarine's bullets (one per 5 steps, 10 steps of life) <= 4; divers (one per 30 steps,
    60 steps of life) <= 4. A spawn that finds its array full is dropped.
Terminated: see above. Score: the return (kills and surfacing bonuses).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import (
    CELLS,
    DOWN,
    FIRE,
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

SUB_FRONT, SUB_BACK, FRIENDLY_BULLET, TRAIL, ENEMY_BULLET = 0, 1, 2, 3, 4
ENEMY_FISH, ENEMY_SUB, OXYGEN_GAUGE, DIVER_GAUGE, DIVER = 5, 6, 7, 8, 9
NUM_CHANNELS = 10
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
MINIMAL_ACTIONS = (NOOP, LEFT, UP, RIGHT, DOWN, FIRE)  # MinAtar's minimal set: all six
# capacities (see the module docstring)
MAX_ENEMIES = 32
MAX_ENEMY_BULLETS = 40
MAX_BULLETS = 4
MAX_DIVERS = 4
# entity columns: x, y, moving right, move timer (fish, subs, divers), shot timer (subs)
EX, EY, ELR, EMOVE, ESHOT = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class SeaquestParams(MinAtarParams):
    """Mirrors ``[game.minatar-seaquest]`` in config.toml; defaults are MinAtar's."""

    minimal_action_set: bool = False
    """MinAtar's minimal set for Seaquest is all 6 actions: this changes nothing"""
    ramping: bool = True
    """each surfacing makes enemies spawn and move faster (MinAtar's difficulty_ramping)"""


def _rows(n, columns):
    return lambda p: (n, columns)


MAX_RAMPS = INIT_SPAWN_SPEED - 1  # ramping stops when spawns come every step: after 19 ramps
# The diver count goes below 0 only by surfacing (MinAtar's quirk), at most once per two steps
# of an episode whose step count is an int32: a generous, documented floor.
MIN_DIVER_COUNT = -(2**30)

# the submarine and the game's counters, MinAtar's names (its lists' lengths as n_*), with the
# range the game keeps each in between steps
SCALARS = (
    ("sub_x", "() the submarine's column", 0, SIZE - 1),
    ("sub_y", "() the submarine's row (0: the surface)", 0, SIZE - 2),
    ("sub_or", "() 1 the submarine faces right, 0 left", 0, 1),
    ("oxygen", "() oxygen left (200 full)", 0, MAX_OXYGEN),
    (
        "diver_count",
        "() divers held (< 0 after a six-diver bonus: MinAtar's quirk)",
        MIN_DIVER_COUNT,
        6,
    ),
    ("e_spawn_speed", "() steps between enemy spawns (20, ramps to 1)", 1, INIT_SPAWN_SPEED),
    ("e_spawn_timer", "() steps until an enemy spawns", 0, INIT_SPAWN_SPEED),
    ("d_spawn_timer", "() steps until a diver spawns", 0, DIVER_SPAWN_SPEED),
    (
        "move_speed",
        "() enemies move every move_speed + 1 steps (5, ramps to 2)",
        2,
        INIT_MOVE_INTERVAL,
    ),
    ("ramp_index", "() surfacings that ramped the difficulty", 0, MAX_RAMPS),
    # firing sets the cooldown and the same step counts it down
    ("shot_timer", "() steps until the submarine may fire", 0, SHOT_COOL_DOWN - 1),
    ("surface", "() 1 while the submarine is on the surface", 0, 1),
    ("n_bullets", "() the submarine's bullets in flight (rows of bullets)", 0, MAX_BULLETS),
    ("n_e_bullets", "() enemy bullets in flight (rows of e_bullets)", 0, MAX_ENEMY_BULLETS),
    ("n_fish", "() enemy fish (rows of fish)", 0, MAX_ENEMIES),
    ("n_subs", "() enemy subs (rows of subs)", 0, MAX_ENEMIES),
    ("n_divers", "() divers (rows of divers)", 0, MAX_DIVERS),
)
# Lists: rows past a list's count are left as they were (never read; a spawn overwrites the
# whole row), and a row removed as it left the screen holds the column it stepped to: -1 or
# 10, or -2 or 11 for an enemy bullet fired from a sub that had just left. The rows in use are
# held to the screen by check_state.
STATE = (
    *(Field(name, scalar, np.int32, doc, low=low, high=high) for name, doc, low, high in SCALARS),
    Field(
        "bullets", _rows(MAX_BULLETS, 3), np.int32, "(4, 3) x, y, moving right", low=-1, high=SIZE
    ),
    Field(
        "e_bullets",
        _rows(MAX_ENEMY_BULLETS, 3),
        np.int32,
        "(40, 3) x, y, moving right",
        low=-2,
        high=SIZE + 1,
    ),
    Field(
        "fish",
        _rows(MAX_ENEMIES, 4),
        np.int32,
        "(32, 4) x, y, moving right, move timer",
        low=-1,
        high=SIZE,
    ),
    Field(
        "subs",
        _rows(MAX_ENEMIES, 5),
        np.int32,
        "(32, 5) fish's columns + shot timer",
        low=-1,
        high=max(SIZE, ENEMY_SHOT_INTERVAL),
    ),
    Field(
        "divers",
        _rows(MAX_DIVERS, 4),
        np.int32,
        "(4, 4) x, y, moving right, move timer",
        low=-1,
        high=SIZE,
    ),
)
# for check_state: each list, its count and each column's range in the rows in use
LISTS = (
    ("bullets", "n_bullets", ((0, SIZE - 1), (0, SIZE - 2), (0, 1))),
    ("e_bullets", "n_e_bullets", ((0, SIZE - 1), (1, SIZE - 2), (0, 1))),
    ("fish", "n_fish", ((0, SIZE - 1), (1, SIZE - 2), (0, 1), (0, INIT_MOVE_INTERVAL))),
    (
        "subs",
        "n_subs",
        ((0, SIZE - 1), (1, SIZE - 2), (0, 1), (0, INIT_MOVE_INTERVAL), (0, ENEMY_SHOT_INTERVAL)),
    ),
    ("divers", "n_divers", ((0, SIZE - 1), (1, SIZE - 2), (0, 1), (0, DIVER_MOVE_INTERVAL))),
)
COLUMNS = ("x", "y", "moving right", "move timer", "shot timer")


def check_state(state, params):
    """Every row in use of each list holds an entity on the screen: its cell is written into
    the observation, and a bullet's or enemy's row and column are compared with the others'."""
    for name, count, ranges in LISTS:
        rows = state[name]  # (num_envs, capacity, columns)
        used = np.arange(rows.shape[1]) < state[count][:, None]  # (num_envs, capacity)
        for column, (low, high) in enumerate(ranges):
            bad = np.zeros(rows.shape, dtype=bool)
            bad[..., column] = used & ((rows[..., column] < low) | (rows[..., column] > high))
            valid = f"{low} to {high} ({COLUMNS[column]} of the first {count} rows)"
            problem = invariant_problem(name, rows, bad, valid)
            if problem:
                return problem
    return None


# ------------------------------------------------------------------------------- lists


def remove_row(i, rows, count, j):
    """``list.remove`` of row ``j`` of ``rows`` (``count[i]`` of them): the rows after it shift
    down by one."""
    n = count[i]
    for k in range(j, n - 1):
        for c in range(rows.shape[2]):
            rows[i, k, c] = rows[i, k + 1, c]
    count[i] = n - 1


def first_at(i, rows, n, x, y):
    """Index of the first row at ``(x, y)``, or -1."""
    for k in range(n):
        if rows[i, k, EX] == x and rows[i, k, EY] == y:
            return k
    return -1


def step_x(x, rightward):
    return x + 1 if rightward else x - 1


# ------------------------------------------------------------------------------- sub-steps


def spawn_enemy(i, s):
    """MinAtar's ``_spawn_enemy``: direction, kind, row; none where a row's enemies move the
    other way."""
    rightward = 1 if rand_float(s.rng, i) < 0.5 else 0
    is_sub = rand_float(s.rng, i) < 1.0 / 3.0
    y = 1 + rand_int(s.rng, i, 8)
    for k in range(s.n_subs[i]):
        if s.subs[i, k, EY] == y and s.subs[i, k, ELR] != rightward:
            return
    for k in range(s.n_fish[i]):
        if s.fish[i, k, EY] == y and s.fish[i, k, ELR] != rightward:
            return
    x = 0 if rightward else SIZE - 1
    if is_sub:
        n = s.n_subs[i]
        if n < MAX_ENEMIES:
            s.subs[i, n, EX], s.subs[i, n, EY], s.subs[i, n, ELR] = x, y, rightward
            s.subs[i, n, EMOVE], s.subs[i, n, ESHOT] = s.move_speed[i], ENEMY_SHOT_INTERVAL
            s.n_subs[i] = n + 1
    else:
        n = s.n_fish[i]
        if n < MAX_ENEMIES:
            s.fish[i, n, EX], s.fish[i, n, EY], s.fish[i, n, ELR] = x, y, rightward
            s.fish[i, n, EMOVE] = s.move_speed[i]
            s.n_fish[i] = n + 1


def spawn_diver(i, s):
    """MinAtar's ``_spawn_diver``: direction, then a row in 1-8."""
    rightward = 1 if rand_float(s.rng, i) < 0.5 else 0
    y = 1 + rand_int(s.rng, i, 8)
    n = s.n_divers[i]
    if n < MAX_DIVERS:
        s.divers[i, n, EX], s.divers[i, n, EY] = 0 if rightward else SIZE - 1, y
        s.divers[i, n, ELR], s.divers[i, n, EMOVE] = rightward, DIVER_MOVE_INTERVAL
        s.n_divers[i] = n + 1


def move_bullets(i, s):
    """The submarine's bullets, newest first: move, leave the screen, or kill the first fish
    (else the first sub) in their cell. Returns the reward."""
    reward = 0.0
    idx = s.n_bullets[i] - 1
    while 0 <= idx < s.n_bullets[i]:
        j = idx
        idx -= 1
        x = step_x(s.bullets[i, j, EX], s.bullets[i, j, ELR])
        s.bullets[i, j, EX] = x
        if x < 0 or x > SIZE - 1:
            remove_row(i, s.bullets, s.n_bullets, j)
            continue
        y = s.bullets[i, j, EY]
        k = first_at(i, s.fish, s.n_fish[i], x, y)
        if k >= 0:
            remove_row(i, s.fish, s.n_fish, k)
            remove_row(i, s.bullets, s.n_bullets, j)
            reward += 1.0
            continue
        k = first_at(i, s.subs, s.n_subs[i], x, y)
        if k >= 0:
            remove_row(i, s.subs, s.n_subs, k)
            remove_row(i, s.bullets, s.n_bullets, j)
            reward += 1.0
    return reward


def move_divers(i, s):
    """Divers, newest first: picked up on contact (while fewer than 6), else move on their
    timer, leaving at the edges."""
    divers = s.divers
    sx, sy = s.sub_x[i], s.sub_y[i]
    idx = s.n_divers[i] - 1
    while 0 <= idx < s.n_divers[i]:
        j = idx
        idx -= 1
        if divers[i, j, EX] == sx and divers[i, j, EY] == sy and s.diver_count[i] < 6:
            remove_row(i, divers, s.n_divers, j)
            s.diver_count[i] += 1
        elif divers[i, j, EMOVE] == 0:
            divers[i, j, EMOVE] = DIVER_MOVE_INTERVAL
            x = step_x(divers[i, j, EX], divers[i, j, ELR])
            divers[i, j, EX] = x
            if x < 0 or x > SIZE - 1:
                remove_row(i, divers, s.n_divers, j)
            elif x == sx and divers[i, j, EY] == sy and s.diver_count[i] < 6:
                remove_row(i, divers, s.n_divers, j)
                s.diver_count[i] += 1
        else:
            divers[i, j, EMOVE] -= 1


def move_enemies(i, rows, count, shoots, s):
    """Subs (``shoots``) or fish (``rows``, ``count[i]`` of them), newest first: contact ends
    the episode; move on their timer, leaving at the edges or dying on a bullet; subs fire on
    their shot timer, even one that just left or died. Returns (reward, terminal)."""
    reward = 0.0
    terminal = False
    sx, sy = s.sub_x[i], s.sub_y[i]
    idx = count[i] - 1
    while 0 <= idx < count[i]:
        j = idx
        idx -= 1
        x, y, rightward = rows[i, j, EX], rows[i, j, EY], rows[i, j, ELR]
        gone = False
        if x == sx and y == sy:
            terminal = True
        if rows[i, j, EMOVE] == 0:
            rows[i, j, EMOVE] = s.move_speed[i]
            x = step_x(x, rightward)
            rows[i, j, EX] = x
            if x < 0 or x > SIZE - 1:
                gone = True
            elif x == sx and y == sy:
                terminal = True
            else:
                k = first_at(i, s.bullets, s.n_bullets[i], x, y)
                if k >= 0:
                    gone = True
                    remove_row(i, s.bullets, s.n_bullets, k)
                    reward += 1.0
        else:
            rows[i, j, EMOVE] -= 1
        if shoots:
            shot = rows[i, j, ESHOT]
            if shot == 0:
                rows[i, j, ESHOT] = ENEMY_SHOT_INTERVAL
                n = s.n_e_bullets[i]
                if n < MAX_ENEMY_BULLETS:
                    e_bullets = s.e_bullets
                    e_bullets[i, n, EX], e_bullets[i, n, EY], e_bullets[i, n, ELR] = x, y, rightward
                    s.n_e_bullets[i] = n + 1
            else:
                rows[i, j, ESHOT] = shot - 1
        if gone:
            remove_row(i, rows, count, j)
    return reward, terminal


def move_enemy_bullets(i, s):
    """Enemy bullets, newest first: contact before or after moving ends the episode."""
    e_bullets = s.e_bullets
    terminal = False
    sx, sy = s.sub_x[i], s.sub_y[i]
    idx = s.n_e_bullets[i] - 1
    while 0 <= idx < s.n_e_bullets[i]:
        j = idx
        idx -= 1
        if e_bullets[i, j, EX] == sx and e_bullets[i, j, EY] == sy:
            terminal = True
        x = step_x(e_bullets[i, j, EX], e_bullets[i, j, ELR])
        e_bullets[i, j, EX] = x
        if x < 0 or x > SIZE - 1:
            remove_row(i, e_bullets, s.n_e_bullets, j)
        elif x == sx and e_bullets[i, j, EY] == sy:
            terminal = True
    return terminal


def surface(i, s, p):
    """MinAtar's ``_surface``: the bonus with 6 divers, oxygen refilled, one diver taken (the
    count goes to -1 after a bonus: MinAtar's quirk), the difficulty ramped."""
    s.surface[i] = 1
    reward = 0.0
    if s.diver_count[i] == 6:
        s.diver_count[i] = 0
        reward = float(s.oxygen[i] * 10 // MAX_OXYGEN)
    s.oxygen[i] = MAX_OXYGEN
    s.diver_count[i] -= 1
    if p.ramping and (s.e_spawn_speed[i] > 1 or s.move_speed[i] > 2):
        if s.move_speed[i] > 2 and s.ramp_index[i] % 2:
            s.move_speed[i] -= 1
        if s.e_spawn_speed[i] > 1:
            s.e_spawn_speed[i] -= 1
        s.ramp_index[i] += 1
    return reward


def move(i, a, s, p):
    """MinAtar's ``Env.act`` for action ``a``: returns (reward, terminal)."""
    if s.e_spawn_timer[i] == 0:
        spawn_enemy(i, s)
        s.e_spawn_timer[i] = s.e_spawn_speed[i]
    if s.d_spawn_timer[i] == 0:
        spawn_diver(i, s)
        s.d_spawn_timer[i] = DIVER_SPAWN_SPEED
    if a == FIRE and s.shot_timer[i] == 0:
        n = s.n_bullets[i]
        if n < MAX_BULLETS:
            s.bullets[i, n, EX], s.bullets[i, n, EY] = s.sub_x[i], s.sub_y[i]
            s.bullets[i, n, ELR] = s.sub_or[i]
            s.n_bullets[i] = n + 1
        s.shot_timer[i] = SHOT_COOL_DOWN
    elif a == LEFT:
        s.sub_x[i] = max(0, s.sub_x[i] - 1)
        s.sub_or[i] = 0
    elif a == RIGHT:
        s.sub_x[i] = min(SIZE - 1, s.sub_x[i] + 1)
        s.sub_or[i] = 1
    elif a == UP:
        s.sub_y[i] = max(0, s.sub_y[i] - 1)
    elif a == DOWN:
        s.sub_y[i] = min(SIZE - 2, s.sub_y[i] + 1)
    reward = move_bullets(i, s)
    move_divers(i, s)
    r, terminal = move_enemies(i, s.subs, s.n_subs, True, s)
    reward += r
    r, t = move_enemies(i, s.fish, s.n_fish, False, s)
    reward += r
    terminal = terminal or t
    terminal = move_enemy_bullets(i, s) or terminal
    if s.e_spawn_timer[i] > 0:
        s.e_spawn_timer[i] -= 1
    if s.d_spawn_timer[i] > 0:
        s.d_spawn_timer[i] -= 1
    if s.shot_timer[i] > 0:
        s.shot_timer[i] -= 1
    if s.oxygen[i] <= 0:
        terminal = True
    if s.sub_y[i] > 0:
        s.oxygen[i] -= 1
        s.surface[i] = 0
    elif s.surface[i] == 0:
        if s.diver_count[i] == 0:
            terminal = True
        else:
            reward += surface(i, s, p)
    return reward, terminal


def mark(i, obs, channel, y, x):
    obs[i, channel * CELLS + y * SIZE + x] = 1


def mark_trail(i, obs, y, x, rightward):
    back = x - 1 if rightward else x + 1
    if 0 <= back <= SIZE - 1:
        mark(i, obs, TRAIL, y, back)


def write_obs(i, io, s, p):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    obs = io.obs_flat
    for k in range(NUM_CHANNELS * CELLS):
        obs[i, k] = 0
    sx, sy = s.sub_x[i], s.sub_y[i]
    mark(i, obs, SUB_FRONT, sy, sx)
    back = sx - 1 if s.sub_or[i] else sx + 1
    mark(i, obs, SUB_BACK, sy, back % SIZE)  # MinAtar's index -1 is column 9
    for k in range(max(0, s.oxygen[i]) * 10 // MAX_OXYGEN):
        mark(i, obs, OXYGEN_GAUGE, SIZE - 1, k)
    for k in range(max(0, SIZE - 1 - s.diver_count[i]), SIZE - 1):
        mark(i, obs, DIVER_GAUGE, SIZE - 1, k)
    for k in range(s.n_bullets[i]):
        mark(i, obs, FRIENDLY_BULLET, s.bullets[i, k, EY], s.bullets[i, k, EX])
    for k in range(s.n_e_bullets[i]):
        mark(i, obs, ENEMY_BULLET, s.e_bullets[i, k, EY], s.e_bullets[i, k, EX])
    fish, subs, divers = s.fish, s.subs, s.divers
    for k in range(s.n_fish[i]):
        mark(i, obs, ENEMY_FISH, fish[i, k, EY], fish[i, k, EX])
        mark_trail(i, obs, fish[i, k, EY], fish[i, k, EX], fish[i, k, ELR])
    for k in range(s.n_subs[i]):
        mark(i, obs, ENEMY_SUB, subs[i, k, EY], subs[i, k, EX])
        mark_trail(i, obs, subs[i, k, EY], subs[i, k, EX], subs[i, k, ELR])
    for k in range(s.n_divers[i]):
        mark(i, obs, DIVER, divers[i, k, EY], divers[i, k, EX])
        mark_trail(i, obs, divers[i, k, EY], divers[i, k, EX], divers[i, k, ELR])


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    s.sub_x[i] = 5
    s.sub_y[i] = 0
    s.sub_or[i] = 0
    s.oxygen[i] = MAX_OXYGEN
    s.diver_count[i] = 0
    s.e_spawn_speed[i] = INIT_SPAWN_SPEED
    s.e_spawn_timer[i] = INIT_SPAWN_SPEED
    s.d_spawn_timer[i] = DIVER_SPAWN_SPEED
    s.move_speed[i] = INIT_MOVE_INTERVAL
    s.ramp_index[i] = 0
    s.shot_timer[i] = 0
    s.surface[i] = 1
    s.n_bullets[i] = 0
    s.n_e_bullets[i] = 0
    s.n_fish[i] = 0
    s.n_subs[i] = 0
    s.n_divers[i] = 0
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
    """The 10x10 screen: the submarine '>' or '<' (facing) with '=' its back, '-' its bullets,
    'f' fish, 's' enemy subs, '*' enemy bullets, 'd' divers, '.' empty; then a line with the
    oxygen, the divers held and the difficulty."""
    rows = [["."] * SIZE for _ in range(SIZE)]
    for name, count, symbol in (
        ("divers", "n_divers", "d"),
        ("fish", "n_fish", "f"),
        ("subs", "n_subs", "s"),
        ("e_bullets", "n_e_bullets", "*"),
        ("bullets", "n_bullets", "-"),
    ):
        for k in range(int(state[count])):
            x, y = int(state[name][k][EX]), int(state[name][k][EY])
            rows[y][x] = symbol
    sx, sy, right = int(state["sub_x"]), int(state["sub_y"]), int(state["sub_or"])
    rows[sy][(sx - 1 if right else sx + 1) % SIZE] = "="
    rows[sy][sx] = ">" if right else "<"
    frame = "+" + "-" * SIZE + "+"
    status = (
        f"oxygen {int(state['oxygen'])}  divers {int(state['diver_count'])}  "
        f"ramp {int(state['ramp_index'])}"
    )
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame, status])


SPEC = spec(
    "seaquest",
    SeaquestParams,
    STATE,
    NUM_CHANNELS,
    MINIMAL_ACTIONS,
    reset_one,
    step_one,
    render_text,
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_seaquest [envs] [steps]
    main(SPEC)

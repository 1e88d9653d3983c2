"""MinAtar Seaquest: a submarine shoots fish and enemy subs, rescues divers and surfaces for air.

A step-for-step port of ``minatar`` 1.0.15's ``seaquest.py`` with its ``Environment`` wrapper
(sticky actions), checked against the package in tests/games/test_minatar_seaquest.py.

Observation: uint8, shape ``(10, 10, 10)``, MinAtar's channels in its order:
    channel 0  the submarine's front        channel 5  enemy fish
    channel 1  the submarine's back         channel 6  enemy subs
    channel 2  the submarine's bullets      channel 7  oxygen gauge (bottom row, from the left)
    channel 3  trail: the cell behind       channel 8  divers gauge (bottom row, ending at
               each fish, sub and diver                column 8)
    channel 4  enemy bullets                channel 9  divers
Actions: MinAtar's full set of 6, ``0 n, 1 l, 2 u, 3 r, 4 d, 5 f``; its minimal set is the same
    6 actions, so ``minimal_action_set`` changes nothing here (kept for a uniform interface).
Sticky actions: with probability ``sticky_action_prob`` (0.1) a step repeats the previous
    step's action instead of the one given; the previous action carries over into the next
    episode, as in MinAtar (its ``Environment`` never resets it).
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
Terminated: see above. Truncated: never, as in MinAtar, unless ``max_episode_steps`` > 0.
Score: the return (kills and surfacing bonuses).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import render_rgb
from fasttrain.kernels import Field, GameSpec, rand_float, rand_int

SIZE = 10
CELLS = SIZE * SIZE
SUB_FRONT, SUB_BACK, FRIENDLY_BULLET, TRAIL, ENEMY_BULLET = 0, 1, 2, 3, 4
ENEMY_FISH, ENEMY_SUB, OXYGEN_GAUGE, DIVER_GAUGE, DIVER = 5, 6, 7, 8, 9
NUM_CHANNELS = 10
RAMP_INTERVAL = 100  # (unused by MinAtar's Seaquest: it ramps on surfacing)
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = 0, 1, 2, 3, 4, 5
MINIMAL_ACTIONS = (NOOP, LEFT, UP, RIGHT, DOWN, FIRE)  # MinAtar's minimal set: all six
# capacities (see the module docstring)
MAX_ENEMIES = 32
MAX_ENEMY_BULLETS = 40
MAX_BULLETS = 4
MAX_DIVERS = 4
# the scalars array ``game``: one int32 per name
(
    SUB_X, SUB_Y, SUB_OR, OXYGEN, DIVER_COUNT, E_SPAWN_SPEED, E_SPAWN_TIMER, D_SPAWN_TIMER,
    MOVE_SPEED, RAMP_INDEX, SHOT_TIMER, SURFACE, N_BULLETS, N_ENEMY_BULLETS, N_FISH, N_SUBS,
    N_DIVERS,
) = range(17)  # fmt: skip
NUM_SCALARS = 17
# entity columns: x, y, moving right, move timer (fish, subs, divers), shot timer (subs)
EX, EY, ELR, EMOVE, ESHOT = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class SeaquestParams:
    """Mirrors ``[game.minatar-seaquest]`` in config.toml; defaults are MinAtar's."""

    sticky_action_prob: float = 0.1
    """probability that a step repeats the previous action instead of the one given"""
    minimal_action_set: bool = False
    """MinAtar's minimal set for Seaquest is all 6 actions: this changes nothing"""
    ramping: bool = True
    """each surfacing makes enemies spawn and move faster (MinAtar's difficulty_ramping)"""
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
    Field("game", lambda p: (NUM_SCALARS,), np.int32, "(17,) the scalars (see SUB_X ... N_DIVERS)"),
    Field("bullets", lambda p: (MAX_BULLETS, 3), np.int32, "(4, 3) x, y, moving right"),
    Field("e_bullets", lambda p: (MAX_ENEMY_BULLETS, 3), np.int32, "(40, 3) x, y, moving right"),
    Field("fish", lambda p: (MAX_ENEMIES, 4), np.int32, "(32, 4) x, y, moving right, move timer"),
    Field("subs", lambda p: (MAX_ENEMIES, 5), np.int32, "(32, 5) fish's columns + shot timer"),
    Field("divers", lambda p: (MAX_DIVERS, 4), np.int32, "(4, 4) x, y, moving right, move timer"),
    Field("last_action", _scalar, np.int32, "() the previous step's action (full set)"),
    Field("steps", _scalar, np.int32, "() steps in this episode"),
)


# ------------------------------------------------------------------------------- lists


def remove_row(i, rows, game, n_index, j):
    """``list.remove`` of row ``j``: the rows after it shift down by one."""
    n = game[i, n_index]
    for k in range(j, n - 1):
        for c in range(rows.shape[2]):
            rows[i, k, c] = rows[i, k + 1, c]
    game[i, n_index] = n - 1


def first_at(i, rows, n, x, y):
    """Index of the first row at ``(x, y)``, or -1."""
    for k in range(n):
        if rows[i, k, EX] == x and rows[i, k, EY] == y:
            return k
    return -1


def step_x(x, rightward):
    return x + 1 if rightward else x - 1


# ------------------------------------------------------------------------------- sub-steps


def spawn_enemy(i, rng, game, fish, subs):
    """MinAtar's ``_spawn_enemy``: direction, kind, row; none where a row's enemies move the
    other way."""
    rightward = 1 if rand_float(rng, i) < 0.5 else 0
    is_sub = rand_float(rng, i) < 1.0 / 3.0
    y = 1 + rand_int(rng, i, 8)
    for k in range(game[i, N_SUBS]):
        if subs[i, k, EY] == y and subs[i, k, ELR] != rightward:
            return
    for k in range(game[i, N_FISH]):
        if fish[i, k, EY] == y and fish[i, k, ELR] != rightward:
            return
    x = 0 if rightward else SIZE - 1
    if is_sub:
        n = game[i, N_SUBS]
        if n < MAX_ENEMIES:
            subs[i, n, EX], subs[i, n, EY], subs[i, n, ELR] = x, y, rightward
            subs[i, n, EMOVE], subs[i, n, ESHOT] = game[i, MOVE_SPEED], ENEMY_SHOT_INTERVAL
            game[i, N_SUBS] = n + 1
    else:
        n = game[i, N_FISH]
        if n < MAX_ENEMIES:
            fish[i, n, EX], fish[i, n, EY], fish[i, n, ELR] = x, y, rightward
            fish[i, n, EMOVE] = game[i, MOVE_SPEED]
            game[i, N_FISH] = n + 1


def spawn_diver(i, rng, game, divers):
    """MinAtar's ``_spawn_diver``: direction, then a row in 1-8."""
    rightward = 1 if rand_float(rng, i) < 0.5 else 0
    y = 1 + rand_int(rng, i, 8)
    n = game[i, N_DIVERS]
    if n < MAX_DIVERS:
        divers[i, n, EX], divers[i, n, EY] = 0 if rightward else SIZE - 1, y
        divers[i, n, ELR], divers[i, n, EMOVE] = rightward, DIVER_MOVE_INTERVAL
        game[i, N_DIVERS] = n + 1


def move_bullets(i, game, bullets, fish, subs):
    """The submarine's bullets, newest first: move, leave the screen, or kill the first fish
    (else the first sub) in their cell. Returns the reward."""
    reward = 0.0
    idx = game[i, N_BULLETS] - 1
    while 0 <= idx < game[i, N_BULLETS]:
        j = idx
        idx -= 1
        x = step_x(bullets[i, j, EX], bullets[i, j, ELR])
        bullets[i, j, EX] = x
        if x < 0 or x > SIZE - 1:
            remove_row(i, bullets, game, N_BULLETS, j)
            continue
        y = bullets[i, j, EY]
        k = first_at(i, fish, game[i, N_FISH], x, y)
        if k >= 0:
            remove_row(i, fish, game, N_FISH, k)
            remove_row(i, bullets, game, N_BULLETS, j)
            reward += 1.0
            continue
        k = first_at(i, subs, game[i, N_SUBS], x, y)
        if k >= 0:
            remove_row(i, subs, game, N_SUBS, k)
            remove_row(i, bullets, game, N_BULLETS, j)
            reward += 1.0
    return reward


def move_divers(i, game, divers):
    """Divers, newest first: picked up on contact (while fewer than 6), else move on their
    timer, leaving at the edges."""
    sx, sy = game[i, SUB_X], game[i, SUB_Y]
    idx = game[i, N_DIVERS] - 1
    while 0 <= idx < game[i, N_DIVERS]:
        j = idx
        idx -= 1
        if divers[i, j, EX] == sx and divers[i, j, EY] == sy and game[i, DIVER_COUNT] < 6:
            remove_row(i, divers, game, N_DIVERS, j)
            game[i, DIVER_COUNT] += 1
        elif divers[i, j, EMOVE] == 0:
            divers[i, j, EMOVE] = DIVER_MOVE_INTERVAL
            x = step_x(divers[i, j, EX], divers[i, j, ELR])
            divers[i, j, EX] = x
            if x < 0 or x > SIZE - 1:
                remove_row(i, divers, game, N_DIVERS, j)
            elif x == sx and divers[i, j, EY] == sy and game[i, DIVER_COUNT] < 6:
                remove_row(i, divers, game, N_DIVERS, j)
                game[i, DIVER_COUNT] += 1
        else:
            divers[i, j, EMOVE] -= 1


def move_enemies(i, game, rows, n_index, bullets, e_bullets, shoots):
    """Subs (``shoots``) or fish, newest first: contact ends the episode; move on their timer,
    leaving at the edges or dying on a bullet; subs fire on their shot timer, even one that
    just left or died. Returns (reward, terminal)."""
    reward = 0.0
    terminal = False
    sx, sy = game[i, SUB_X], game[i, SUB_Y]
    idx = game[i, n_index] - 1
    while 0 <= idx < game[i, n_index]:
        j = idx
        idx -= 1
        x, y, rightward = rows[i, j, EX], rows[i, j, EY], rows[i, j, ELR]
        gone = False
        if x == sx and y == sy:
            terminal = True
        if rows[i, j, EMOVE] == 0:
            rows[i, j, EMOVE] = game[i, MOVE_SPEED]
            x = step_x(x, rightward)
            rows[i, j, EX] = x
            if x < 0 or x > SIZE - 1:
                gone = True
            elif x == sx and y == sy:
                terminal = True
            else:
                k = first_at(i, bullets, game[i, N_BULLETS], x, y)
                if k >= 0:
                    gone = True
                    remove_row(i, bullets, game, N_BULLETS, k)
                    reward += 1.0
        else:
            rows[i, j, EMOVE] -= 1
        if shoots:
            shot = rows[i, j, ESHOT]
            if shot == 0:
                rows[i, j, ESHOT] = ENEMY_SHOT_INTERVAL
                n = game[i, N_ENEMY_BULLETS]
                if n < MAX_ENEMY_BULLETS:
                    e_bullets[i, n, EX], e_bullets[i, n, EY], e_bullets[i, n, ELR] = x, y, rightward
                    game[i, N_ENEMY_BULLETS] = n + 1
            else:
                rows[i, j, ESHOT] = shot - 1
        if gone:
            remove_row(i, rows, game, n_index, j)
    return reward, terminal


def move_enemy_bullets(i, game, e_bullets):
    """Enemy bullets, newest first: contact before or after moving ends the episode."""
    terminal = False
    sx, sy = game[i, SUB_X], game[i, SUB_Y]
    idx = game[i, N_ENEMY_BULLETS] - 1
    while 0 <= idx < game[i, N_ENEMY_BULLETS]:
        j = idx
        idx -= 1
        if e_bullets[i, j, EX] == sx and e_bullets[i, j, EY] == sy:
            terminal = True
        x = step_x(e_bullets[i, j, EX], e_bullets[i, j, ELR])
        e_bullets[i, j, EX] = x
        if x < 0 or x > SIZE - 1:
            remove_row(i, e_bullets, game, N_ENEMY_BULLETS, j)
        elif x == sx and e_bullets[i, j, EY] == sy:
            terminal = True
    return terminal


def surface(i, game, ramping):
    """MinAtar's ``_surface``: the bonus with 6 divers, oxygen refilled, one diver taken (the
    count goes to -1 after a bonus: MinAtar's quirk), the difficulty ramped."""
    game[i, SURFACE] = 1
    reward = 0.0
    if game[i, DIVER_COUNT] == 6:
        game[i, DIVER_COUNT] = 0
        reward = float(game[i, OXYGEN] * 10 // MAX_OXYGEN)
    game[i, OXYGEN] = MAX_OXYGEN
    game[i, DIVER_COUNT] -= 1
    if ramping and (game[i, E_SPAWN_SPEED] > 1 or game[i, MOVE_SPEED] > 2):
        if game[i, MOVE_SPEED] > 2 and game[i, RAMP_INDEX] % 2:
            game[i, MOVE_SPEED] -= 1
        if game[i, E_SPAWN_SPEED] > 1:
            game[i, E_SPAWN_SPEED] -= 1
        game[i, RAMP_INDEX] += 1
    return reward


def move(i, a, rng, game, bullets, e_bullets, fish, subs, divers, ramping):
    """MinAtar's ``Env.act`` for action ``a``: returns (reward, terminal)."""
    if game[i, E_SPAWN_TIMER] == 0:
        spawn_enemy(i, rng, game, fish, subs)
        game[i, E_SPAWN_TIMER] = game[i, E_SPAWN_SPEED]
    if game[i, D_SPAWN_TIMER] == 0:
        spawn_diver(i, rng, game, divers)
        game[i, D_SPAWN_TIMER] = DIVER_SPAWN_SPEED
    if a == FIRE and game[i, SHOT_TIMER] == 0:
        n = game[i, N_BULLETS]
        if n < MAX_BULLETS:
            bullets[i, n, EX], bullets[i, n, EY] = game[i, SUB_X], game[i, SUB_Y]
            bullets[i, n, ELR] = game[i, SUB_OR]
            game[i, N_BULLETS] = n + 1
        game[i, SHOT_TIMER] = SHOT_COOL_DOWN
    elif a == LEFT:
        game[i, SUB_X] = max(0, game[i, SUB_X] - 1)
        game[i, SUB_OR] = 0
    elif a == RIGHT:
        game[i, SUB_X] = min(SIZE - 1, game[i, SUB_X] + 1)
        game[i, SUB_OR] = 1
    elif a == UP:
        game[i, SUB_Y] = max(0, game[i, SUB_Y] - 1)
    elif a == DOWN:
        game[i, SUB_Y] = min(SIZE - 2, game[i, SUB_Y] + 1)
    reward = move_bullets(i, game, bullets, fish, subs)
    move_divers(i, game, divers)
    r, terminal = move_enemies(i, game, subs, N_SUBS, bullets, e_bullets, True)
    reward += r
    r, t = move_enemies(i, game, fish, N_FISH, bullets, e_bullets, False)
    reward += r
    terminal = terminal or t
    terminal = move_enemy_bullets(i, game, e_bullets) or terminal
    for k in (E_SPAWN_TIMER, D_SPAWN_TIMER, SHOT_TIMER):
        if game[i, k] > 0:
            game[i, k] -= 1
    if game[i, OXYGEN] <= 0:
        terminal = True
    if game[i, SUB_Y] > 0:
        game[i, OXYGEN] -= 1
        game[i, SURFACE] = 0
    elif game[i, SURFACE] == 0:
        if game[i, DIVER_COUNT] == 0:
            terminal = True
        else:
            reward += surface(i, game, ramping)
    return reward, terminal


def mark(i, obs_flat, channel, y, x):
    obs_flat[i, channel * CELLS + y * SIZE + x] = 1


def mark_trail(i, obs_flat, y, x, rightward):
    back = x - 1 if rightward else x + 1
    if 0 <= back <= SIZE - 1:
        mark(i, obs_flat, TRAIL, y, back)


def write_obs(i, obs_flat, game, bullets, e_bullets, fish, subs, divers):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    for k in range(NUM_CHANNELS * CELLS):
        obs_flat[i, k] = 0
    sx, sy = game[i, SUB_X], game[i, SUB_Y]
    mark(i, obs_flat, SUB_FRONT, sy, sx)
    back = sx - 1 if game[i, SUB_OR] else sx + 1
    mark(i, obs_flat, SUB_BACK, sy, back % SIZE)  # MinAtar's index -1 is column 9
    for k in range(max(0, game[i, OXYGEN]) * 10 // MAX_OXYGEN):
        mark(i, obs_flat, OXYGEN_GAUGE, SIZE - 1, k)
    for k in range(max(0, SIZE - 1 - game[i, DIVER_COUNT]), SIZE - 1):
        mark(i, obs_flat, DIVER_GAUGE, SIZE - 1, k)
    for k in range(game[i, N_BULLETS]):
        mark(i, obs_flat, FRIENDLY_BULLET, bullets[i, k, EY], bullets[i, k, EX])
    for k in range(game[i, N_ENEMY_BULLETS]):
        mark(i, obs_flat, ENEMY_BULLET, e_bullets[i, k, EY], e_bullets[i, k, EX])
    for k in range(game[i, N_FISH]):
        mark(i, obs_flat, ENEMY_FISH, fish[i, k, EY], fish[i, k, EX])
        mark_trail(i, obs_flat, fish[i, k, EY], fish[i, k, EX], fish[i, k, ELR])
    for k in range(game[i, N_SUBS]):
        mark(i, obs_flat, ENEMY_SUB, subs[i, k, EY], subs[i, k, EX])
        mark_trail(i, obs_flat, subs[i, k, EY], subs[i, k, EX], subs[i, k, ELR])
    for k in range(game[i, N_DIVERS]):
        mark(i, obs_flat, DIVER, divers[i, k, EY], divers[i, k, EX])
        mark_trail(i, obs_flat, divers[i, k, EY], divers[i, k, EX], divers[i, k, ELR])


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, obs_flat, game, bullets, e_bullets, fish, subs, divers, steps):
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    for k in range(NUM_SCALARS):
        game[i, k] = 0
    game[i, OXYGEN] = MAX_OXYGEN
    game[i, SUB_X] = 5
    game[i, E_SPAWN_SPEED] = INIT_SPAWN_SPEED
    game[i, E_SPAWN_TIMER] = INIT_SPAWN_SPEED
    game[i, D_SPAWN_TIMER] = DIVER_SPAWN_SPEED
    game[i, MOVE_SPEED] = INIT_MOVE_INTERVAL
    game[i, SURFACE] = 1
    steps[i] = 0
    write_obs(i, obs_flat, game, bullets, e_bullets, fish, subs, divers)


# one line per argument group: env index and I/O buffers, state arrays, params
def step_one(
    i, actions, obs_flat, rewards, terminated, truncated, rng, score,
    game, bullets, e_bullets, fish, subs, divers, last_action, steps,
    sticky_action_prob, minimal_action_set, ramping, max_episode_steps,
):  # fmt: skip
    """MinAtar's ``Environment.act``: the sticky-action draw, then the game's step."""
    a = actions[i]  # the minimal set is the full set
    if rand_float(rng, i) < sticky_action_prob:
        a = last_action[i]
    last_action[i] = a
    reward, terminal = move(i, a, rng, game, bullets, e_bullets, fish, subs, divers, ramping)
    steps[i] += 1
    rewards[i] = reward
    score[i] += reward
    terminated[i] = terminal
    truncated[i] = (not terminal) and 0 < max_episode_steps <= steps[i]
    write_obs(i, obs_flat, game, bullets, e_bullets, fish, subs, divers)


# ------------------------------------------------------------------------------- render


def render_text(state, params) -> str:
    """The 10x10 screen: the submarine '>' or '<' (facing) with '=' its back, '-' its bullets,
    'f' fish, 's' enemy subs, '*' enemy bullets, 'd' divers, '.' empty; then a line with the
    oxygen, the divers held and the difficulty."""
    g = state["game"]
    rows = [["."] * SIZE for _ in range(SIZE)]
    for name, count, symbol in (
        ("divers", N_DIVERS, "d"),
        ("fish", N_FISH, "f"),
        ("subs", N_SUBS, "s"),
        ("e_bullets", N_ENEMY_BULLETS, "*"),
        ("bullets", N_BULLETS, "-"),
    ):
        for k in range(int(g[count])):
            x, y = int(state[name][k][EX]), int(state[name][k][EY])
            rows[y][x] = symbol
    sx, sy = int(g[SUB_X]), int(g[SUB_Y])
    rows[sy][(sx - 1 if g[SUB_OR] else sx + 1) % SIZE] = "="
    rows[sy][sx] = ">" if g[SUB_OR] else "<"
    frame = "+" + "-" * SIZE + "+"
    status = f"oxygen {int(g[OXYGEN])}  divers {int(g[DIVER_COUNT])}  ramp {int(g[RAMP_INDEX])}"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame, status])


SPEC = GameSpec(
    name="minatar-seaquest",
    params_cls=SeaquestParams,
    state=STATE,
    obs_shape=lambda p: (NUM_CHANNELS, SIZE, SIZE),
    obs_dtype=np.uint8,
    num_actions=6,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.minatar_seaquest [envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, SeaquestParams(), sys.argv[1:])

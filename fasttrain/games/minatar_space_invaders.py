"""MinAtar Space Invaders: a cannon on the bottom row shoots down waves of marching aliens.

A step-for-step port of ``minatar`` 1.0.15's ``space_invaders.py`` with its ``Environment``
wrapper (sticky actions, actions, truncation and score as in every port: ``_minatar.py``),
checked against the package in tests/fasttrain/games/test_minatar_space_invaders.py.

Observation: uint8, shape ``(6, 10, 10)``, MinAtar's channels in its order:
    channel 0  cannon (on the bottom row)
    channel 1  aliens
    channel 2  aliens, when they march left (else empty)
    channel 3  aliens, when they march right (else empty)
    channel 4  the cannon's bullets
    channel 5  the aliens' bullets
Actions: MinAtar's full set of 6; with ``minimal_action_set = true``, 4 actions ``0 n, 1 l,
    2 r, 3 f``. The sticky-action draw is the only random number: the game is deterministic.
Start: the cannon in column 5; a block of 4 x 6 aliens (rows 0-3, columns 2-7) marching left.
Dynamics, in MinAtar's order: fire (a bullet starts in the cannon's cell; then a 5-step
    cooldown) or move; the cannon's bullets rise one row and leave at the top, the aliens'
    bullets fall one row and leave at the bottom. The aliens move every ``min(aliens left,
    move interval)`` steps (so the last few aliens move fast): one column sideways, or, when a
    column at the edge they march toward is occupied, one row down with the direction turned.
    Every 10th step the alien nearest the cannon fires: the column nearest the cannon's (the
    left one on a tie), its lowest alien. A bullet in an alien's cell kills both (+1). When the
    last alien dies a new block appears; with ``ramping`` the move interval drops by 1 each
    wave, from 12 down to 6.
Terminated: an alien bullet or an alien in the cannon's cell, or aliens on the bottom row when
    the block turns. As in MinAtar, the step that ends the episode still scores its kills.
Quirk kept: moving down wraps MinAtar's ``np.roll``, so aliens already on the bottom row
    reappear on the top row in the (terminal) step that moves them down.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import (
    CELLS,
    FIRE,
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
from fasttrain.kernels import Field

CANNON, ALIEN, ALIEN_LEFT, ALIEN_RIGHT, FRIENDLY_BULLET, ENEMY_BULLET = 0, 1, 2, 3, 4, 5
NUM_CHANNELS = 6
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
FASTEST_MOVE_INTERVAL = 6  # ramping stops here
MINIMAL_ACTIONS = (NOOP, LEFT, RIGHT, FIRE)  # MinAtar's minimal_action_set() for Space Invaders


@dataclass(frozen=True)
class SpaceInvadersParams(MinAtarParams):
    """Mirrors ``[game.minatar-space_invaders]`` in config.toml; defaults are MinAtar's."""

    minimal_action_set: bool = False
    """4 actions (no-op, left, right, fire) instead of MinAtar's full 6"""
    ramping: bool = True
    """each new wave of aliens moves faster (MinAtar's difficulty_ramping)"""


def _map(p):
    return (CELLS,)


MAX_RAMPS = ENEMY_MOVE_INTERVAL - FASTEST_MOVE_INTERVAL
# Bounds: what the game keeps between steps. The aliens' move timer restarts at the number of
# aliens when fewer are left than the interval, and a wave ends only for the next to appear, so
# at least one alien is always on the screen (check_state).
STATE = (
    Field("pos", scalar, np.int32, "() cannon column", low=0, high=SIZE - 1),
    Field("alien_dir", scalar, np.int32, "() -1 the aliens march left, +1 right", low=-1, high=1),
    Field(
        "move_interval",
        scalar,
        np.int32,
        "() steps between alien moves (12, ramps to 6)",
        low=FASTEST_MOVE_INTERVAL,
        high=ENEMY_MOVE_INTERVAL,
    ),
    Field(
        "alien_move_timer",
        scalar,
        np.int32,
        "() steps until the aliens move",
        low=0,
        high=ENEMY_MOVE_INTERVAL,
    ),
    Field(
        "alien_shot_timer",
        scalar,
        np.int32,
        "() steps until an alien fires",
        low=0,
        high=ENEMY_SHOT_INTERVAL,
    ),
    Field(
        "shot_timer",
        scalar,
        np.int32,
        "() steps until the cannon may fire",
        low=0,
        high=SHOT_COOL_DOWN - 1,  # firing sets the cooldown, the same step counts it down
    ),
    Field(
        "ramp_index", scalar, np.int32, "() waves that sped the aliens up", low=0, high=MAX_RAMPS
    ),
    Field("aliens", _map, np.uint8, "(100,) 1 where an alien is, row-major", low=0, high=1),
    Field("f_bullets", _map, np.uint8, "(100,) the cannon's bullets", low=0, high=1),
    Field("e_bullets", _map, np.uint8, "(100,) the aliens' bullets", low=0, high=1),
)


def check_state(state, params):
    """The aliens march left or right (-1 or +1, never 0), and at least one is on the screen."""
    direction = state["alien_dir"]
    problem = invariant_problem("alien_dir", direction, direction == 0, "-1 or 1")
    if problem:
        return problem
    aliens = state["aliens"]
    count = aliens.astype(np.int64).sum(axis=1)
    return invariant_problem("number of aliens", count, count == 0, f"1 to {CELLS}")


# ------------------------------------------------------------------------------- sub-steps


def count(i, cells):
    n = 0
    for k in range(CELLS):
        if cells[i, k]:
            n += 1
    return n


def column_has(i, cells, col):
    for r in range(SIZE):
        if cells[i, r * SIZE + col]:
            return True
    return False


def row_has(i, cells, row):
    for c in range(SIZE):
        if cells[i, row * SIZE + c]:
            return True
    return False


def fill_block(i, aliens):
    """A new wave: rows 0-3, columns 2-7."""
    for r in range(4):
        for c in range(2, 8):
            aliens[i, r * SIZE + c] = 1


def aliens_down(i, aliens):
    """``np.roll(alien_map, 1, axis=0)``: down one row, the bottom row wrapping to the top."""
    for c in range(SIZE):
        bottom = aliens[i, (SIZE - 1) * SIZE + c]
        for r in range(SIZE - 1, 0, -1):
            aliens[i, r * SIZE + c] = aliens[i, (r - 1) * SIZE + c]
        aliens[i, c] = bottom


def aliens_sideways(i, aliens, d):
    """``np.roll(alien_map, d, axis=1)`` for ``d`` = +1 or -1 (columns wrap)."""
    for r in range(SIZE):
        base = r * SIZE
        if d > 0:
            last = aliens[i, base + SIZE - 1]
            for c in range(SIZE - 1, 0, -1):
                aliens[i, base + c] = aliens[i, base + c - 1]
            aliens[i, base] = last
        else:
            first = aliens[i, base]
            for c in range(SIZE - 1):
                aliens[i, base + c] = aliens[i, base + c + 1]
            aliens[i, base + SIZE - 1] = first


def alien_fires(i, pos, aliens, e_bullets):
    """MinAtar's ``_nearest_alien``: columns by distance to the cannon (the left one first on a
    tie, Python's stable sort), the lowest alien of the first occupied column fires."""
    for d in range(SIZE):
        for side in range(2):
            if d == 0 and side == 1:
                continue
            c = pos - d if side == 0 else pos + d
            if 0 <= c < SIZE and column_has(i, aliens, c):
                for r in range(SIZE - 1, -1, -1):
                    if aliens[i, r * SIZE + c]:
                        e_bullets[i, r * SIZE + c] = 1
                        return


def move(i, a, s, p):
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    aliens, f_bullets, e_bullets = s.aliens, s.f_bullets, s.e_bullets
    terminal = False
    pos = s.pos[i]
    if a == FIRE and s.shot_timer[i] == 0:
        f_bullets[i, (SIZE - 1) * SIZE + pos] = 1
        s.shot_timer[i] = SHOT_COOL_DOWN
    elif a == LEFT:
        pos = max(0, pos - 1)
    elif a == RIGHT:
        pos = min(SIZE - 1, pos + 1)
    s.pos[i] = pos
    # the cannon's bullets rise (leaving at the top), the aliens' fall (leaving at the bottom)
    for k in range(CELLS - SIZE):
        f_bullets[i, k] = f_bullets[i, k + SIZE]
    for k in range(CELLS - SIZE, CELLS):
        f_bullets[i, k] = 0
    for k in range(CELLS - 1, SIZE - 1, -1):
        e_bullets[i, k] = e_bullets[i, k - SIZE]
    for k in range(SIZE):
        e_bullets[i, k] = 0
    bottom = (SIZE - 1) * SIZE
    if e_bullets[i, bottom + pos]:
        terminal = True
    if aliens[i, bottom + pos]:
        terminal = True
    if s.alien_move_timer[i] == 0:
        s.alien_move_timer[i] = min(count(i, aliens), s.move_interval[i])
        d = s.alien_dir[i]
        if (d < 0 and column_has(i, aliens, 0)) or (d > 0 and column_has(i, aliens, SIZE - 1)):
            s.alien_dir[i] = -d
            if row_has(i, aliens, SIZE - 1):
                terminal = True
            aliens_down(i, aliens)
        else:
            aliens_sideways(i, aliens, d)
        if aliens[i, bottom + pos]:
            terminal = True
    if s.alien_shot_timer[i] == 0:
        s.alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
        alien_fires(i, pos, aliens, e_bullets)
    reward = 0.0
    for k in range(CELLS):
        if aliens[i, k] and f_bullets[i, k]:
            reward += 1.0
            aliens[i, k] = 0
            f_bullets[i, k] = 0
    if s.shot_timer[i] > 0:
        s.shot_timer[i] -= 1
    s.alien_move_timer[i] -= 1
    s.alien_shot_timer[i] -= 1
    if count(i, aliens) == 0:
        if s.move_interval[i] > FASTEST_MOVE_INTERVAL and p.ramping:
            s.move_interval[i] -= 1
            s.ramp_index[i] += 1
        fill_block(i, aliens)
    return reward, terminal


def write_obs(i, io, s, p):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    obs = io.obs_flat
    marching = ALIEN_LEFT if s.alien_dir[i] < 0 else ALIEN_RIGHT
    idle = ALIEN_RIGHT if s.alien_dir[i] < 0 else ALIEN_LEFT
    for k in range(CELLS):
        obs[i, CANNON * CELLS + k] = 0
        obs[i, ALIEN * CELLS + k] = s.aliens[i, k]
        obs[i, marching * CELLS + k] = s.aliens[i, k]
        obs[i, idle * CELLS + k] = 0
        obs[i, FRIENDLY_BULLET * CELLS + k] = s.f_bullets[i, k]
        obs[i, ENEMY_BULLET * CELLS + k] = s.e_bullets[i, k]
    obs[i, CANNON * CELLS + (SIZE - 1) * SIZE + s.pos[i]] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    s.pos[i] = 5
    for k in range(CELLS):
        s.aliens[i, k] = 0
        s.f_bullets[i, k] = 0
        s.e_bullets[i, k] = 0
    fill_block(i, s.aliens)
    s.alien_dir[i] = -1
    s.move_interval[i] = ENEMY_MOVE_INTERVAL
    s.alien_move_timer[i] = ENEMY_MOVE_INTERVAL
    s.alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
    s.ramp_index[i] = 0
    s.shot_timer[i] = 0
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
    """The 10x10 screen: '<' / '>' an alien and the way the block marches, '|' the cannon's
    bullet, '!' an alien bullet, 'A' the cannon, '.' empty."""
    rows = [["."] * SIZE for _ in range(SIZE)]
    alien = "<" if int(state["alien_dir"]) < 0 else ">"
    for k in range(CELLS):
        if state["e_bullets"][k]:
            rows[k // SIZE][k % SIZE] = "!"
        if state["f_bullets"][k]:
            rows[k // SIZE][k % SIZE] = "|"
        if state["aliens"][k]:
            rows[k // SIZE][k % SIZE] = alien
    rows[SIZE - 1][int(state["pos"])] = "A"
    frame = "+" + "-" * SIZE + "+"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame])


SPEC = spec(
    "space_invaders",
    SpaceInvadersParams,
    STATE,
    NUM_CHANNELS,
    MINIMAL_ACTIONS,
    reset_one,
    step_one,
    render_text,
    check_state=check_state,
)


if __name__ == "__main__":  # python -m fasttrain.games.minatar_space_invaders [envs] [steps]
    main(SPEC)

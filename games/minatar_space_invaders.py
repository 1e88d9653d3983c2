"""MinAtar Space Invaders: a cannon on the bottom row shoots down waves of marching aliens.

A step-for-step port of ``minatar`` 1.0.15's ``space_invaders.py`` with its ``Environment``
wrapper (sticky actions), checked against the package in tests/games/test_minatar_space_invaders.py.

Observation: uint8, shape ``(6, 10, 10)``, MinAtar's channels in its order:
    channel 0  cannon (on the bottom row)
    channel 1  aliens
    channel 2  aliens, when they march left (else empty)
    channel 3  aliens, when they march right (else empty)
    channel 4  the cannon's bullets
    channel 5  the aliens' bullets
Actions: MinAtar's full set of 6, ``0 n, 1 l, 2 u, 3 r, 4 d, 5 f``; with ``minimal_action_set =
    true``, 4 actions ``0 n, 1 l, 2 r, 3 f``.
Sticky actions: with probability ``sticky_action_prob`` (0.1) a step repeats the previous
    step's action instead of the one given; the previous action carries over into the next
    episode, as in MinAtar (its ``Environment`` never resets it). The sticky-action draw is the
    only random number: the game itself is deterministic.
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
Truncated: never, as in MinAtar, unless ``max_episode_steps`` > 0.
Quirk kept: moving down wraps MinAtar's ``np.roll``, so aliens already on the bottom row
    reappear on the top row in the (terminal) step that moves them down.
Score: aliens killed in the episode (equal to the return).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games._minatar import render_rgb
from fasttrain.kernels import Field, GameSpec, rand_float

SIZE = 10
CELLS = SIZE * SIZE
CANNON, ALIEN, ALIEN_LEFT, ALIEN_RIGHT, FRIENDLY_BULLET, ENEMY_BULLET = 0, 1, 2, 3, 4, 5
NUM_CHANNELS = 6
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
FASTEST_MOVE_INTERVAL = 6  # ramping stops here
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = 0, 1, 2, 3, 4, 5
MINIMAL_ACTIONS = (NOOP, LEFT, RIGHT, FIRE)  # MinAtar's minimal_action_set() for Space Invaders


@dataclass(frozen=True)
class SpaceInvadersParams:
    """Mirrors ``[game.minatar-space_invaders]`` in config.toml; defaults are MinAtar's."""

    sticky_action_prob: float = 0.1
    """probability that a step repeats the previous action instead of the one given"""
    minimal_action_set: bool = False
    """4 actions (no-op, left, right, fire) instead of MinAtar's full 6"""
    ramping: bool = True
    """each new wave of aliens moves faster (MinAtar's difficulty_ramping)"""
    max_episode_steps: int = 0
    """truncate episodes at this many steps (0: no limit, as in MinAtar)"""

    def __post_init__(self):
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.max_episode_steps < 0:
            raise ValueError("max_episode_steps must be >= 0 (0 means no limit)")


def _scalar(p):
    return ()


def _map(p):
    return (CELLS,)


STATE = (
    Field("pos", _scalar, np.int32, "() cannon column"),
    Field("alien_dir", _scalar, np.int32, "() -1 the aliens march left, +1 right"),
    Field("move_interval", _scalar, np.int32, "() steps between alien moves (12, ramps to 6)"),
    Field("alien_move_timer", _scalar, np.int32, "() steps until the aliens move"),
    Field("alien_shot_timer", _scalar, np.int32, "() steps until an alien fires"),
    Field("shot_timer", _scalar, np.int32, "() steps until the cannon may fire"),
    Field("ramp_index", _scalar, np.int32, "() waves that sped the aliens up"),
    Field("aliens", _map, np.uint8, "(100,) 1 where an alien is, row-major"),
    Field("f_bullets", _map, np.uint8, "(100,) the cannon's bullets"),
    Field("e_bullets", _map, np.uint8, "(100,) the aliens' bullets"),
    Field("last_action", _scalar, np.int32, "() the previous step's action (full set)"),
    Field("steps", _scalar, np.int32, "() steps in this episode"),
)


# ------------------------------------------------------------------------------- sub-steps


def full_action(action, minimal_action_set):
    """The full-set action of ``action`` (the minimal set maps 0, 1, 2, 3 to n, l, r, f)."""
    if minimal_action_set:
        return (NOOP, LEFT, RIGHT, FIRE)[action]
    return action


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


def move(
    i, a, pos, alien_dir, move_interval, alien_move_timer, alien_shot_timer, shot_timer,
    ramp_index, aliens, f_bullets, e_bullets, ramping,
):  # fmt: skip
    """MinAtar's ``Env.act`` for action ``a`` (full set): returns (reward, terminal)."""
    terminal = False
    p = pos[i]
    if a == FIRE and shot_timer[i] == 0:
        f_bullets[i, (SIZE - 1) * SIZE + p] = 1
        shot_timer[i] = SHOT_COOL_DOWN
    elif a == LEFT:
        p = max(0, p - 1)
    elif a == RIGHT:
        p = min(SIZE - 1, p + 1)
    pos[i] = p
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
    if e_bullets[i, bottom + p]:
        terminal = True
    if aliens[i, bottom + p]:
        terminal = True
    if alien_move_timer[i] == 0:
        alien_move_timer[i] = min(count(i, aliens), move_interval[i])
        d = alien_dir[i]
        if (d < 0 and column_has(i, aliens, 0)) or (d > 0 and column_has(i, aliens, SIZE - 1)):
            alien_dir[i] = -d
            if row_has(i, aliens, SIZE - 1):
                terminal = True
            aliens_down(i, aliens)
        else:
            aliens_sideways(i, aliens, d)
        if aliens[i, bottom + p]:
            terminal = True
    if alien_shot_timer[i] == 0:
        alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
        alien_fires(i, p, aliens, e_bullets)
    reward = 0.0
    for k in range(CELLS):
        if aliens[i, k] and f_bullets[i, k]:
            reward += 1.0
            aliens[i, k] = 0
            f_bullets[i, k] = 0
    if shot_timer[i] > 0:
        shot_timer[i] -= 1
    alien_move_timer[i] -= 1
    alien_shot_timer[i] -= 1
    if count(i, aliens) == 0:
        if move_interval[i] > FASTEST_MOVE_INTERVAL and ramping:
            move_interval[i] -= 1
            ramp_index[i] += 1
        fill_block(i, aliens)
    return reward, terminal


def write_obs(i, obs_flat, pos, alien_dir, aliens, f_bullets, e_bullets):
    """MinAtar's ``Env.state()`` as ``(channel, row, column)``."""
    marching = ALIEN_LEFT if alien_dir[i] < 0 else ALIEN_RIGHT
    idle = ALIEN_RIGHT if alien_dir[i] < 0 else ALIEN_LEFT
    for k in range(CELLS):
        obs_flat[i, CANNON * CELLS + k] = 0
        obs_flat[i, ALIEN * CELLS + k] = aliens[i, k]
        obs_flat[i, marching * CELLS + k] = aliens[i, k]
        obs_flat[i, idle * CELLS + k] = 0
        obs_flat[i, FRIENDLY_BULLET * CELLS + k] = f_bullets[i, k]
        obs_flat[i, ENEMY_BULLET * CELLS + k] = e_bullets[i, k]
    obs_flat[i, CANNON * CELLS + (SIZE - 1) * SIZE + pos[i]] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(
    i, obs_flat, pos, alien_dir, move_interval, alien_move_timer, alien_shot_timer, shot_timer,
    ramp_index, aliens, f_bullets, e_bullets, steps,
):  # fmt: skip
    """MinAtar's ``Env.reset`` (no random draws). ``last_action`` carries over."""
    pos[i] = 5
    for k in range(CELLS):
        aliens[i, k] = 0
        f_bullets[i, k] = 0
        e_bullets[i, k] = 0
    fill_block(i, aliens)
    alien_dir[i] = -1
    move_interval[i] = ENEMY_MOVE_INTERVAL
    alien_move_timer[i] = ENEMY_MOVE_INTERVAL
    alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
    ramp_index[i] = 0
    shot_timer[i] = 0
    steps[i] = 0
    write_obs(i, obs_flat, pos, alien_dir, aliens, f_bullets, e_bullets)


# one line per argument group: env index and I/O buffers, state arrays, params
def step_one(
    i, actions, obs_flat, rewards, terminated, truncated, rng, score,
    pos, alien_dir, move_interval, alien_move_timer, alien_shot_timer, shot_timer, ramp_index,
    aliens, f_bullets, e_bullets, last_action, steps,
    sticky_action_prob, minimal_action_set, ramping, max_episode_steps,
):  # fmt: skip
    """MinAtar's ``Environment.act``: the sticky-action draw, then the game's step."""
    a = full_action(actions[i], minimal_action_set)
    if rand_float(rng, i) < sticky_action_prob:
        a = last_action[i]
    last_action[i] = a
    reward, terminal = move(
        i, a, pos, alien_dir, move_interval, alien_move_timer, alien_shot_timer, shot_timer,
        ramp_index, aliens, f_bullets, e_bullets, ramping,
    )  # fmt: skip
    steps[i] += 1
    rewards[i] = reward
    score[i] += reward
    terminated[i] = terminal
    truncated[i] = (not terminal) and 0 < max_episode_steps <= steps[i]
    write_obs(i, obs_flat, pos, alien_dir, aliens, f_bullets, e_bullets)


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


SPEC = GameSpec(
    name="minatar-space_invaders",
    params_cls=SpaceInvadersParams,
    state=STATE,
    obs_shape=lambda p: (NUM_CHANNELS, SIZE, SIZE),
    obs_dtype=np.uint8,
    num_actions=lambda p: len(MINIMAL_ACTIONS) if p.minimal_action_set else 6,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
)


if __name__ == "__main__":  # python -m fasttrain.games.minatar_space_invaders [envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, SpaceInvadersParams(), sys.argv[1:])

"""Snake: one snake on a ``height`` x ``width`` board eats fruit and grows.

Observation: uint8, shape ``(4, height, width)``:
    channel 0  body: 1 on every cell of the snake, head included
    channel 1  head: 1 on the head cell
    channel 2  fruit: 1 on the fruit cell (all zero once the board is full)
    channel 3  body order: on each snake cell, how many steps until it frees if the snake does
               not eat (tail 1, next 2, ..., head = length), capped at 255; 0 elsewhere
Actions: 0 up (row - 1), 1 right (col + 1), 2 down (row + 1), 3 left (col - 1). An action into
    the neck (the opposite of the current heading) keeps the snake going straight.
Start: length 3 in a straight line at a uniformly random place where it fits, heading away from
    its body in a random direction; one fruit on a uniformly random free cell.
Rewards: ``reward_fruit`` (+1) per fruit, ``reward_death`` (-1) on death, ``reward_step`` (0)
    otherwise. The head may enter the cell the tail leaves in the same step.
Terminated: the head leaves the board or hits the body (death), or the snake fills the board (a
    win: the fruit is eaten and no free cell is left).
Truncated: ``max_steps_without_food`` steps without eating (0 means 4 x height x width), or
    ``max_episode_steps`` steps in the episode (0 means no limit).
Score: fruits eaten in the episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.kernels import Field, GameSpec, rand_int

NUM_CHANNELS = 4
UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
START_LENGTH = 3


@dataclass(frozen=True)
class SnakeParams:
    """Mirrors ``[game.snake]`` in config.toml."""

    height: int = 12
    """board rows"""
    width: int = 12
    """board columns"""
    reward_fruit: float = 1.0
    """reward for eating a fruit"""
    reward_death: float = -1.0
    """reward for hitting a wall or the body"""
    reward_step: float = 0.0
    """reward on every other step"""
    max_steps_without_food: int = 0
    """truncate after this many steps without eating (0: 4 x height x width)"""
    max_episode_steps: int = 0
    """truncate episodes at this many steps (0: no limit)"""

    def __post_init__(self):
        if self.height < START_LENGTH or self.width < START_LENGTH:
            raise ValueError(
                f"snake board must be at least {START_LENGTH}x{START_LENGTH}, "
                f"got {self.height}x{self.width}"
            )
        if self.height * self.width > 32767:
            raise ValueError("snake board must have at most 32767 cells (int16 body)")
        if self.max_steps_without_food < 0 or self.max_episode_steps < 0:
            raise ValueError("max_steps_without_food and max_episode_steps must be >= 0")


def _cells(p):
    return (p.height * p.width,)


def _num_cells(p):
    return p.height * p.width


def _last_cell(p):
    return p.height * p.width - 1


# Bounds read only the board size: a curriculum may change the other params between steps, so a
# state may hold counters from an earlier stage's limits (docs/kernels.md#state-from-a-file).
STATE = (
    Field("body", _cells, np.int16, "(H*W,) ring of cells r*W+c, tail first", 0, _last_cell),
    Field("tail", lambda p: (), np.int32, "() ring index of the tail cell in body", 0, _last_cell),
    Field("length", lambda p: (), np.int32, "() cells in the snake", START_LENGTH, _num_cells),
    Field("direction", lambda p: (), np.int8, "() current heading, 0..3", UP, LEFT),
    Field("fruit", lambda p: (), np.int32, "() fruit cell r*W+c, -1: board full", -1, _last_cell),
    Field("grid", _cells, np.uint8, "(H*W,) 1 where the snake is", 0, 1),
    Field("steps_since_food", lambda p: (), np.int32, "() steps since the last fruit", low=0),
    Field("steps", lambda p: (), np.int32, "() steps in this episode", low=0),
)


# ------------------------------------------------------------------------------- sub-steps


def move_head(r, c, d):
    """The cell one step from (r, c) in direction d (may be off the board)."""
    if d == UP:
        return r - 1, c
    if d == RIGHT:
        return r, c + 1
    if d == DOWN:
        return r + 1, c
    return r, c - 1


def turn(direction, action):
    """New heading: an action into the neck keeps the snake going straight."""
    if action == direction ^ 2:  # 0 <-> 2, 1 <-> 3: the opposite heading
        return direction
    return action


def place_fruit(i, s, p):
    """Put the fruit on a uniformly random free cell (-1 when none is free)."""
    cells = p.height * p.width
    free = cells - s.length[i]
    if free <= 0:
        s.fruit[i] = -1
        return
    if 2 * free >= cells:  # mostly empty board: rejection sampling, still uniform over free cells
        while True:
            cell = rand_int(s.rng, i, cells)
            if s.grid[i, cell] == 0:
                s.fruit[i] = cell
                return
    k = rand_int(s.rng, i, free)
    for cell in range(cells):
        if s.grid[i, cell] == 0:
            if k == 0:
                s.fruit[i] = cell
                return
            k -= 1


def write_obs(i, io, s, p):
    """Write the full observation of env i from its state (flat index: channel * cells + cell)."""
    cells = p.height * p.width
    obs = io.obs_flat
    for k in range(obs.shape[1]):  # explicit loops: faster than slice fill, and portable
        obs[i, k] = 0
    n = s.length[i]
    slot = s.tail[i]
    for k in range(n):
        cell = s.body[i, slot]
        obs[i, cell] = 1
        obs[i, 3 * cells + cell] = min(k + 1, 255)
        slot += 1
        if slot == cells:
            slot = 0
    obs[i, cells + s.body[i, slot - 1 if slot > 0 else cells - 1]] = 1  # the head
    if s.fruit[i] >= 0:
        obs[i, 2 * cells + s.fruit[i]] = 1


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """Start a new episode in env i: a length-3 snake and one fruit."""
    height, width = p.height, p.width
    for cell in range(height * width):
        s.grid[i, cell] = 0
    d = rand_int(s.rng, i, 4)
    if d == UP:  # the body trails below the head, so the head row is at most height - 3
        r, c = rand_int(s.rng, i, height - 2), rand_int(s.rng, i, width)
    elif d == DOWN:
        r, c = 2 + rand_int(s.rng, i, height - 2), rand_int(s.rng, i, width)
    elif d == RIGHT:
        r, c = rand_int(s.rng, i, height), 2 + rand_int(s.rng, i, width - 2)
    else:
        r, c = rand_int(s.rng, i, height), rand_int(s.rng, i, width - 2)
    back = d ^ 2
    for k in range(START_LENGTH):  # head at slot 2, tail at slot 0
        cell = r * width + c
        s.body[i, START_LENGTH - 1 - k] = cell
        s.grid[i, cell] = 1
        r, c = move_head(r, c, back)
    s.tail[i] = 0
    s.length[i] = START_LENGTH
    s.direction[i] = d
    s.steps[i] = 0
    s.steps_since_food[i] = 0
    place_fruit(i, s, p)
    write_obs(i, io, s, p)


def step_one(i, io, s, p):
    """Advance env i by one move."""
    width = p.width
    cells = p.height * width
    d = turn(s.direction[i], io.actions[i])
    s.direction[i] = d
    head_slot = s.tail[i] + s.length[i] - 1  # ring index arithmetic without division
    if head_slot >= cells:
        head_slot -= cells
    next_slot = head_slot + 1 if head_slot + 1 < cells else 0
    head = s.body[i, head_slot]
    row = head // width
    r, c = move_head(row, head - row * width, d)
    reward = p.reward_step
    dead = r < 0 or r >= p.height or c < 0 or c >= width
    won = False
    if not dead:
        new = r * width + c
        eats = new == s.fruit[i]
        tail_cell = s.body[i, s.tail[i]]
        # the tail leaves its cell this step unless the snake grows, so the head may enter it
        dead = s.grid[i, new] == 1 and (eats or new != tail_cell)
        if not dead:
            if eats:
                s.length[i] += 1
            else:
                s.grid[i, tail_cell] = 0
                s.tail[i] = s.tail[i] + 1 if s.tail[i] + 1 < cells else 0
            s.body[i, next_slot] = new
            s.grid[i, new] = 1
            s.steps_since_food[i] += 1
            if eats:
                reward = p.reward_fruit
                io.score[i] += 1
                s.steps_since_food[i] = 0
                place_fruit(i, s, p)
                won = s.length[i] == cells
    if dead:
        reward = p.reward_death
    s.steps[i] += 1
    limit = p.max_steps_without_food if p.max_steps_without_food > 0 else 4 * cells
    timed_out = s.steps_since_food[i] >= limit or (0 < p.max_episode_steps <= s.steps[i])
    io.rewards[i] = reward
    io.terminated[i] = dead or won
    io.truncated[i] = timed_out and not (dead or won)
    write_obs(i, io, s, p)


# ------------------------------------------------------------------------------- state check


def _first_env(bad: np.ndarray) -> int:
    """The env (leading index) of the first True in ``bad``."""
    return int(np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)[0])


def _ring(state, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Each env's body cells in ring order from the tail, (N, H*W) int64, and which of them the
    snake uses (the first ``length``)."""
    slots = (state["tail"][:, None].astype(np.int64) + np.arange(cells)) % cells
    ring = np.take_along_axis(state["body"].astype(np.int64), slots, axis=1)
    return ring, np.arange(cells) < state["length"][:, None]


def check_state(state, params) -> str | None:
    """The invariants ``step_one`` relies on, for state from a file (the fields' bounds hold):
    ``grid`` is 1 exactly on the ``length`` ring cells from ``tail`` (each once), so
    ``place_fruit`` finds the free cells it counts and its rejection loop ends; consecutive
    cells are neighbours and the head moved in ``direction``; the fruit is on a free cell, -1
    only on a full board."""
    height, width = params.height, params.width
    cells = height * width
    ring, used = _ring(state, cells)
    envs = np.broadcast_to(np.arange(len(ring))[:, None], ring.shape)
    covered = np.zeros(ring.shape, dtype=np.int64)  # times the used ring holds each cell
    np.add.at(covered, (envs[used], ring[used]), 1)
    bad = covered != state["grid"]
    if bad.any():
        i = _first_env(bad)
        cell = int(np.flatnonzero(bad[i])[0])
        return (
            f"env {i}: grid[{cell}] = {int(state['grid'][i, cell])}, but the body "
            f"({int(state['length'][i])} cells from ring slot {int(state['tail'][i])}) covers "
            f"cell {cell} {int(covered[i, cell])} time(s); grid is 1 exactly on the body's "
            "cells, each covered once"
        )
    rows, cols = ring // width, ring % width
    steps = np.abs(np.diff(rows, axis=1)) + np.abs(np.diff(cols, axis=1))
    bad = (steps != 1) & used[:, 1:]
    if bad.any():
        i = _first_env(bad)
        k = int(np.flatnonzero(bad[i])[0])
        return f"env {i}: body cells {ring[i, k]} and {ring[i, k + 1]} are not neighbours"
    head = state["length"].astype(np.int64)[:, None] - 1  # ring positions of head and neck
    dr = (np.take_along_axis(rows, head, 1) - np.take_along_axis(rows, head - 1, 1))[:, 0]
    dc = (np.take_along_axis(cols, head, 1) - np.take_along_axis(cols, head - 1, 1))[:, 0]
    moved = np.select([dr == -1, dc == 1, dr == 1], [UP, RIGHT, DOWN], LEFT)
    bad = moved != state["direction"]
    if bad.any():
        i = _first_env(bad)
        return (
            f"env {i}: direction = {int(state['direction'][i])} but the head last moved "
            f"{int(moved[i])} (0 up, 1 right, 2 down, 3 left)"
        )
    fruit = state["fruit"].astype(np.int64)
    full = state["length"] == cells
    on_body = state["grid"][np.arange(len(fruit)), np.maximum(fruit, 0)] != 0
    bad = ((fruit < 0) != full) | ((fruit >= 0) & on_body)
    if bad.any():
        i = _first_env(bad)
        return (
            f"env {i}: fruit = {int(fruit[i])} with length = {int(state['length'][i])} of "
            f"{cells} cells; valid: a free cell, -1 only when the board is full"
        )
    return None


# ------------------------------------------------------------------------------- render


def render_text(state, params) -> str:
    """One character per cell: '@' head, 'o' body, '*' fruit, '.' empty, inside a frame."""
    h, w = params.height, params.width
    rows = [["."] * w for _ in range(h)]
    cells = h * w
    n, tail = int(state["length"]), int(state["tail"])
    for k in range(n):
        cell = int(state["body"][(tail + k) % cells])
        rows[cell // w][cell % w] = "@" if k == n - 1 else "o"
    if int(state["fruit"]) >= 0:
        rows[int(state["fruit"]) // w][int(state["fruit"]) % w] = "*"
    frame = "+" + "-" * w + "+"
    return "\n".join([frame, *("|" + "".join(row) + "|" for row in rows), frame])


# colours: empty, body, head, fruit
PALETTE = np.array([[24, 24, 32], [60, 170, 80], [170, 240, 120], [230, 60, 60]], dtype=np.uint8)


def render_rgb(state, obs, params) -> np.ndarray:
    """uint8 ``(height, width, 3)``, one pixel per cell: dark board, green body, light-green
    head, red fruit."""
    h, w = params.height, params.width
    code = np.zeros(h * w, dtype=np.int64)
    cells = h * w
    n, tail = int(state["length"]), int(state["tail"])
    ring = (tail + np.arange(n)) % cells
    body = np.asarray(state["body"])[ring].astype(np.int64)
    code[body] = 1
    code[body[-1]] = 2  # the head: the last cell of the ring
    if int(state["fruit"]) >= 0:
        code[int(state["fruit"])] = 3
    return PALETTE[code.reshape(h, w)]


SPEC = GameSpec(
    name="snake",
    params_cls=SnakeParams,
    state=STATE,
    obs_shape=lambda p: (NUM_CHANNELS, p.height, p.width),
    obs_dtype=np.uint8,
    num_actions=4,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.snake [num_envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, SnakeParams(), sys.argv[1:])

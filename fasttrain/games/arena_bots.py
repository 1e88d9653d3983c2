"""Scripted bots for the arena: scalar policies compiled with the game, run inside its step.

Each policy picks snake ``k``'s action from the map as the snake would see it (the window of
``vision`` cells around its head). Moves are tried in action order (up, down, left, right); the
neck is never a candidate (moving into it keeps going straight, which another action gives).

- ``random``: a uniformly random action.
- ``greedy``: heads for the nearest food or corpse it can see (Manhattan distance; the first
  in row order on a tie), choosing among the moves into a free cell (empty, food or corpse)
  the one that gets closest; with nothing in sight, a random safe move. It never moves into a
  wall or a body when a safe move exists.
- ``cautious``: greedy, but among the safe moves it first avoids cells next to another snake's
  head (where that head may move next), when it can.
"""

from __future__ import annotations

from fasttrain.kernels import rand_int

BOT_POLICIES = ("random", "greedy", "cautious")
RANDOM, GREEDY, CAUTIOUS = 0, 1, 2
_WALL, _FOOD, _CORPSE, _SNAKE = 3, 1, 2, 5  # map tiles, as in arena.py
_FAR = 1 << 30


def _delta(action, width):
    """Cell offset of an action: 0 up, 1 down, 2 left, 3 right."""
    if action == 0:
        return -width
    if action == 1:
        return width
    if action == 2:
        return -1
    return 1


def near_other_head(i, k, cell, s, p):
    """True when a head of another snake is next to ``cell``."""
    for action in range(4):
        next_to = cell + _delta(action, p.width)
        tile = s.grid[i, next_to]
        if tile >= _SNAKE and tile != _SNAKE + k and s.head[i, tile - _SNAKE] == next_to:
            return True
    return False


def _nearest_food(i, h, s, p):
    """The cell of the nearest food or corpse in sight of the head cell ``h`` (Manhattan
    distance; the first in row order on a tie), or -1 when none is in sight."""
    width, vision = p.width, p.vision
    hr = h // width
    hc = h - hr * width
    target = -1
    best = _FAR
    for r in range(hr - vision, hr + vision + 1):
        for c in range(hc - vision, hc + vision + 1):
            tile = s.tiles[i, r * width + c]
            if tile == _FOOD or tile == _CORPSE:
                d = abs(r - hr) + abs(c - hc)
                if d < best:
                    best = d
                    target = r * width + c
    return target


def bot_action(i, k, s, p):
    """The action of bot snake ``k`` under ``p.bot_policy`` (RANDOM, GREEDY or CAUTIOUS)."""
    policy = p.bot_policy
    if policy == RANDOM:
        return rand_int(s.rng, i, 4)
    width = p.width
    h = s.head[i, k]
    slot = s.head_slot[i, k]
    neck = -1
    if s.length[i, k] > 1:
        neck = s.body[i, k, slot - 1 if slot > 0 else p.max_snake_length - 1]
    target = _nearest_food(i, h, s, p)
    tr = target // width
    tc = target - tr * width
    # the best safe move: for CAUTIOUS a calm one (no other head next to it) first, then the
    # nearest to the target; with no target, a random one of the calm (else safe) moves
    chosen = -1
    chosen_key = _FAR
    safe = 0
    calm = 0
    for action in range(4):
        cell = h + _delta(action, width)
        if cell == neck or s.tiles[i, cell] >= _WALL:
            continue
        safe += 1
        key = 0
        if policy == CAUTIOUS and near_other_head(i, k, cell, s, p):
            key = _FAR // 2
        else:
            calm += 1
        if target >= 0:
            cr = cell // width
            key += abs(cr - tr) + abs(cell - cr * width - tc)
        if key < chosen_key:
            chosen_key = key
            chosen = action
    if safe == 0:  # every move dies: keep going straight
        return 0 if neck < 0 else _straight(h, neck, width)
    if target >= 0:
        return chosen
    pick = rand_int(s.rng, i, calm if calm > 0 else safe)
    for action in range(4):
        cell = h + _delta(action, width)
        if cell == neck or s.tiles[i, cell] >= _WALL:
            continue
        if calm > 0 and policy == CAUTIOUS and near_other_head(i, k, cell, s, p):
            continue
        if pick == 0:
            return action
        pick -= 1
    return chosen


def _straight(h, neck, width):
    """The action that continues away from the neck."""
    d = h - neck
    if d == -width:
        return 0
    if d == width:
        return 1
    if d == -1:
        return 2
    return 3

"""Arena: many snakes in one world, by the rules of PufferLib's Ocean Snake (``snake.h``).

Map: ``height`` x ``width`` cells whose outer ``vision`` rows and columns are wall, so every
    window around a head stays on the map. ``num_snakes`` snakes (the agents, processed in index
    order every step) and ``num_food`` food (kept constant: a new piece spawns on a random empty
    or corpse cell whenever one is eaten).
Observation: uint8, shape ``(2*vision+1, 2*vision+1)``: the tiles around the agent's head (the
    head in the centre), as codes:
        0 empty, 1 food, 2 corpse, 3 wall, 4 own body (head included), 5 another snake
    (``OBS_CODES`` of them; ``GameSpec.obs_categories`` tells the models to one-hot them).
Actions: 0 up (row - 1), 1 down (row + 1), 2 left (col - 1), 3 right (col + 1), PufferLib's
    order. Moving into the neck keeps the snake going straight.
Moves: snake 0 moves first, then snake 1, ... each into a map that already shows the moves
    before it, so of two snakes heading into one cell the first gets it and the second dies. The
    tail leaves its cell only after the head has moved, so entering the cell your own tail is
    leaving is death (as in PufferLib).
Rewards: ``reward_food`` per food, ``reward_corpse`` per corpse tile (both grow the snake by one,
    up to ``max_snake_length``), ``reward_death`` for moving into a wall or any body, 0
    otherwise.
Death: the snake is removed at once (with ``leave_corpse_on_death``, every other cell of it
    becomes corpse: as in PufferLib, those with an even count of cells from there to the tail,
    both ends included), so the snakes after it in the order
    can use the freed cells; it is terminated and respawns before the observations are written,
    with length 1 on a random empty or corpse cell. A snake that finds no such cell waits and
    tries again next step (it is terminated again, with reward 0).
Truncated: ``max_episode_steps`` steps in one life (0: no limit, as in PufferLib).
Score: food and corpse tiles eaten in the life.
Bots: ``num_bots`` scripted snakes (``bot_policy``: random, greedy or cautious; see
    ``arena_bots.py``) in slots after the agents, room for ``max_bots`` of them. They move after
    the agents, inside the same step, by the same rules: they eat, die (leaving corpses) and
    kill. A dead bot respawns at its next turn, without moving then. They have no learner rows;
    their ended lives are summed in ``bot_done_food``, ``bot_done_steps`` and
    ``bot_done_lives``. ``num_bots``, ``bot_policy``, ``num_food`` and the rewards may change
    between steps (a curriculum stage): the food is topped up to ``num_food`` at each step, and
    eaten food is not replaced while there is more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.games.arena_bots import BOT_POLICIES, bot_action
from fasttrain.kernels import Field, GameSpec, rand_int

# map tiles; snake k is SNAKE + k (5, not 4: observe turns any tile >= 5 into OTHER, or OWN)
EMPTY, FOOD, CORPSE, WALL, SNAKE = 0, 1, 2, 3, 5
OWN, OTHER = 4, 5  # observation codes of bodies
OBS_CODES = 6
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
SPAWN_TRIES = 64  # random draws before a free cell is searched for in order


@dataclass(frozen=True)
class ArenaParams:
    """Mirrors ``[game.arena]`` in config.toml; PufferLib's names. Small defaults that learn on a
    laptop; PufferLib's own configuration is ``width=640, height=360, num_snakes=256,
    num_food=4096, vision=5, max_snake_length=1024`` with 4 environments."""

    width: int = 24
    """map columns, the vision wall columns on each side included"""
    height: int = 24
    """map rows, the vision wall rows on each side included"""
    num_snakes: int = 8
    """snakes (agents) per environment"""
    num_food: int = 16
    """food on the map at all times"""
    vision: int = 3
    """a snake sees the (2*vision+1)^2 tiles around its head; also the wall's thickness"""
    leave_corpse_on_death: bool = True
    """a dead snake leaves corpse tiles (every other cell of its body)"""
    reward_food: float = 0.1
    """reward for eating food"""
    reward_corpse: float = 0.1
    """reward for eating a corpse tile"""
    reward_death: float = -1.0
    """reward for moving into a wall or a body"""
    max_snake_length: int = 64
    """snakes stop growing at this length"""
    max_episode_steps: int = 0
    """truncate a life at this many steps (0: no limit)"""
    max_bots: int = 0
    """bot snakes each arena has room for (sets buffer shapes; num_bots may change up to it)"""
    num_bots: int = 0
    """scripted snakes playing beside the agents (no learner rows), at most max_bots"""
    bot_policy: str = "greedy"
    """random | greedy | cautious: how the bots play (see fasttrain/games/arena_bots.py)"""

    def __post_init__(self):
        if self.vision < 1:
            raise ValueError(f"arena vision must be >= 1, got {self.vision}")
        if min(self.width, self.height) < 2 * self.vision + 2:
            raise ValueError(
                f"arena width and height must be at least 2*vision+2 = {2 * self.vision + 2}, "
                f"got {self.width}x{self.height}"
            )
        if self.width * self.height > 2**31 - 1:
            raise ValueError("arena map must have fewer than 2**31 cells")
        if self.num_snakes < 1 or self.max_bots < 0:
            raise ValueError(
                f"arena needs num_snakes >= 1 and max_bots >= 0, got {self.num_snakes} and "
                f"{self.max_bots}"
            )
        if self.num_snakes + self.max_bots > 32767 - SNAKE:
            raise ValueError(f"arena num_snakes + max_bots must be at most {32767 - SNAKE}")
        if not 0 <= self.num_bots <= self.max_bots:
            raise ValueError(
                f"arena num_bots must be in 0..max_bots = {self.max_bots}, got {self.num_bots}"
            )
        if self.num_food < 0 or self.max_snake_length < 1 or self.max_episode_steps < 0:
            raise ValueError(
                "arena num_food, max_episode_steps must be >= 0, max_snake_length >= 1"
            )
        free = (self.width - 2 * self.vision) * (self.height - 2 * self.vision)
        if self.num_snakes + self.max_bots + self.num_food > free:
            raise ValueError(
                f"arena: {self.num_snakes} snakes, {self.max_bots} bots and {self.num_food} "
                f"food do not fit on {free} free cells"
            )


def _cells(p):
    return (p.height * p.width,)


def _snakes(p):
    return (p.num_snakes + p.max_bots,)  # the agents, then the bot slots


def _last_slot(p):
    return p.max_snake_length - 1


def _max_length(p):
    return p.max_snake_length


def _bots(p):
    return (max(1, p.max_bots),)  # one slot at least: no zero-size arrays on any backend


def _last_cell(p):
    return p.height * p.width - 1


def _last_tile(p):
    return SNAKE + p.num_snakes + p.max_bots - 1  # the last snake's


def _inside(p):
    return (p.height - 2 * p.vision) * (p.width - 2 * p.vision)


# (low, high) bounds read only params that set shapes: a curriculum stage may change the others
# (num_bots, num_food ...) between steps, and episodes in flight keep what the earlier stage
# made (docs/kernels.md#state-from-a-file). ``check_state`` holds the rest.
STATE = (
    Field("grid", _cells, np.int16, "(H*W,) EMPTY, FOOD, CORPSE, WALL or SNAKE+k", 0, _last_tile),
    Field("tiles", _cells, np.uint8, "(H*W,) grid with every snake as SNAKE", EMPTY, SNAKE),
    Field(
        "body",
        lambda p: (p.num_snakes + p.max_bots, p.max_snake_length),
        np.int32,
        "(S, L) ring buffer of each snake's cells r*W+c; head at head_slot, tail length-1 back",
        low=0,
        high=_last_cell,
    ),
    Field("head_slot", _snakes, np.int32, "(S,) ring index of the head", 0, _last_slot),
    Field("head", _snakes, np.int32, "(S,) head cell; kept after a death", 0, _last_cell),
    Field("length", _snakes, np.int32, "(S,) cells, 0 waiting to respawn", 0, _max_length),
    Field("steps", _snakes, np.int32, "(S,) steps in the current life", low=0),
    Field("missing_food", lambda p: (), np.int32, "() food not placed yet", 0, _inside),
    Field("food_count", lambda p: (), np.int32, "() food on the map", low=0, high=_inside),
    Field("bot_score", _bots, np.int32, "(B,) food and corpse each bot ate in its life", low=0),
    Field("bot_done_food", lambda p: (), np.float64, "() food and corpse of ended bot lives", 0),
    Field("bot_done_steps", lambda p: (), np.float64, "() steps of ended bot lives", low=0),
    Field("bot_done_lives", lambda p: (), np.float64, "() ended bot lives", low=0),
)


# ------------------------------------------------------------------------------- sub-steps


def put(i, s, cell, tile):
    """Set one map cell in both views: ``grid`` (who is there) and ``tiles`` (what a window
    shows before own/other: every snake as SNAKE)."""
    s.grid[i, cell] = tile
    s.tiles[i, cell] = min(tile, SNAKE)


def free_cell(i, s, p):
    """A random empty or corpse cell of the map's inside, or -1 when there is none."""
    width, vision = p.width, p.vision
    inner_w = width - 2 * vision
    inner_h = p.height - 2 * vision
    for _ in range(SPAWN_TRIES):
        cell = (vision + rand_int(s.rng, i, inner_h)) * width + vision + rand_int(s.rng, i, inner_w)
        if s.grid[i, cell] == EMPTY or s.grid[i, cell] == CORPSE:
            return cell
    # a crowded map: the first free cell after a random start, scanning the inside in order
    start = rand_int(s.rng, i, inner_h * inner_w)
    for k in range(inner_h * inner_w):
        j = start + k
        if j >= inner_h * inner_w:
            j -= inner_h * inner_w
        row = j // inner_w
        cell = (vision + row) * width + vision + j - row * inner_w
        if s.grid[i, cell] == EMPTY or s.grid[i, cell] == CORPSE:
            return cell
    return -1


def spawn_food(i, s, p):
    """Put one food on a random empty or corpse cell (counted as missing when none is free)."""
    cell = free_cell(i, s, p)
    if cell < 0:
        s.missing_food[i] += 1
        return
    put(i, s, cell, FOOD)
    s.food_count[i] += 1


def spawn_snake(i, a, s, p):
    """Snake ``a`` starts a life with length 1 on a random empty or corpse cell."""
    s.steps[i, a] = 0
    cell = free_cell(i, s, p)
    if cell < 0:
        s.length[i, a] = 0  # waits: step_one ends this life at once and it tries again
        return
    s.body[i, a, 0] = cell
    s.head_slot[i, a] = 0
    s.head[i, a] = cell
    s.length[i, a] = 1
    put(i, s, cell, SNAKE + a)


def remove_snake(i, a, leave_corpse, s, p):
    """Clear snake ``a`` from the map, head first; with ``leave_corpse``, the cells where an
    even number of cells remain (counting the one being cleared) become corpse, as in
    PufferLib."""
    slot = s.head_slot[i, a]
    n = s.length[i, a]
    while n > 0:
        cell = s.body[i, a, slot]
        put(i, s, cell, CORPSE if leave_corpse and n % 2 == 0 else EMPTY)
        n -= 1
        slot = slot - 1 if slot > 0 else p.max_snake_length - 1
    s.length[i, a] = 0


def end_bot_life(i, b, steps, s):
    """Bot ``b``'s life ended after ``steps`` steps: its food, steps and the life go into the
    sums, and its score starts over."""
    s.bot_done_food[i] += s.bot_score[i, b]
    s.bot_done_steps[i] += steps
    s.bot_done_lives[i] += 1
    s.bot_score[i, b] = 0


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """A fresh map: wall border, every snake (agents, then active bots) spawned in index
    order, then the food."""
    width, height, vision = p.width, p.height, p.vision
    for r in range(height):
        for c in range(width):
            inside = vision <= r < height - vision and vision <= c < width - vision
            put(i, s, r * width + c, EMPTY if inside else WALL)
    for b in range(p.max_bots):  # a world restart ends the bots' lives in progress
        k = p.num_snakes + b
        if s.length[i, k] > 0:
            end_bot_life(i, b, s.steps[i, k], s)
        s.bot_score[i, b] = 0
    for a in range(p.num_snakes + p.max_bots):
        s.length[i, a] = 0
    for a in range(p.num_snakes + p.num_bots):
        spawn_snake(i, a, s, p)
    s.missing_food[i] = 0
    s.food_count[i] = 0
    for _ in range(p.num_food):
        spawn_food(i, s, p)


def reset_agent(i, a, io, s, p):
    """Respawn snake ``a``; a dead snake was removed when it died, a truncated one is cleared
    here (no corpse: it did not die)."""
    remove_snake(i, a, False, s, p)
    spawn_snake(i, a, s, p)


def move_snake(i, k, action, s, p):
    """Move snake ``k`` one cell; returns the tile it moved into: EMPTY, FOOD or CORPSE (it
    grew), or WALL for any death (it was removed, leaving corpses if the game says so)."""
    width, max_length = p.width, p.max_snake_length
    n = s.length[i, k]
    slot = s.head_slot[i, k]
    cell = s.body[i, k, slot]
    step = -width if action == UP else width if action == DOWN else -1 if action == LEFT else 1
    new = cell + step
    if n > 1 and new == s.body[i, k, slot - 1 if slot > 0 else max_length - 1]:
        new = cell - step  # into the neck: keep going straight
    tile = s.grid[i, new]
    if tile >= WALL:
        remove_snake(i, k, p.leave_corpse_on_death, s, p)
        return WALL
    slot = slot + 1 if slot + 1 < max_length else 0
    tail = slot - n
    if tail < 0:
        tail += max_length
    tail_cell = s.body[i, k, tail]  # read first: at full length the head takes its slot
    s.body[i, k, slot] = new
    s.head_slot[i, k] = slot
    s.head[i, k] = new
    grows = tile == FOOD or tile == CORPSE
    if tile == FOOD:
        s.food_count[i] -= 1
        if s.food_count[i] + s.missing_food[i] < p.num_food:  # fewer after a stage lowered it
            spawn_food(i, s, p)
    if grows and n < max_length:
        s.length[i, k] = n + 1
    else:
        put(i, s, tail_cell, EMPTY)
    put(i, s, new, SNAKE + k)
    return tile


def step_one(i, io, s, p):
    """Move every snake once, in index order: the agents, then the bots."""
    # a curriculum stage may have changed num_food: more is spawned now, less is not replaced
    s.missing_food[i] = max(0, p.num_food - s.food_count[i])
    for _ in range(s.missing_food[i]):  # food that found no room earlier tries again
        s.missing_food[i] -= 1
        spawn_food(i, s, p)
    for a in range(p.num_snakes):
        io.terminated[i, a] = False
        io.truncated[i, a] = False
        if s.length[i, a] == 0:  # no cell was free at its respawn
            io.rewards[i, a] = 0.0
            io.terminated[i, a] = True
            continue
        tile = move_snake(i, a, io.actions[i, a], s, p)
        if tile == WALL:
            io.rewards[i, a] = p.reward_death
            io.terminated[i, a] = True
            continue
        reward = p.reward_food if tile == FOOD else p.reward_corpse if tile == CORPSE else 0.0
        io.rewards[i, a] = reward
        if tile != EMPTY:
            io.score[i, a] += 1.0
        s.steps[i, a] += 1
        io.truncated[i, a] = 0 < p.max_episode_steps <= s.steps[i, a]
    for b in range(p.max_bots):
        k = p.num_snakes + b
        if b >= p.num_bots:  # a slot a curriculum stage turned off: its life ends here
            if s.length[i, k] > 0:
                end_bot_life(i, b, s.steps[i, k], s)
                remove_snake(i, k, False, s, p)
            continue
        if s.length[i, k] == 0:  # dead (or new): it respawns now and moves from the next step
            spawn_snake(i, k, s, p)
            continue
        tile = move_snake(i, k, bot_action(i, k, s, p), s, p)
        if tile != WALL:
            s.steps[i, k] += 1
            if tile != EMPTY:
                s.bot_score[i, b] += 1
        if tile == WALL or 0 < p.max_episode_steps <= s.steps[i, k]:  # the life ends
            end_bot_life(i, b, s.steps[i, k] + (tile == WALL), s)
            remove_snake(i, k, False, s, p)


def observe(i, a, io, s, p):
    """Write snake ``a``'s window of tile codes, row by row, its head in the centre."""
    # unsigned indices: a compiled signed index is checked for a negative (wraparound) value
    # at every access; these never are, and dropping the check made the arena ~25% faster.
    # The window reads the uint8 tiles (half the bytes of grid, so the maps stay in cache) and
    # looks at grid only on snake cells, to tell its own body from the others.
    width, vision = p.width, p.vision
    side = np.uint64(2 * vision + 1)
    own = SNAKE + a
    cells = s.tiles[i]
    who = s.grid[i]
    out = io.obs_flat[i, a]
    corner = np.uint64(s.head[i, a] - vision * width - vision)  # the window's top-left cell
    w = np.uint64(width)
    k = np.uint64(0)
    row = corner
    for _ in range(side):
        for c in range(side):
            tile = cells[row + c]
            if tile == SNAKE and who[row + c] == own:
                tile = OWN
            out[k + c] = tile
        k += side
        row += w


def obs_bounds(params):
    """Lowest and highest observation code (for the adapters' observation spaces)."""
    return 0, OBS_CODES - 1


# ------------------------------------------------------------------------------- state check


def _first(bad: np.ndarray) -> tuple[int, ...]:
    """The index of the first True in ``bad`` (its env first)."""
    return tuple(int(x) for x in np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape))


def _inside_mask(p) -> np.ndarray:
    """(H*W,) True on the map's inside, False on its wall border."""
    inside = np.zeros((p.height, p.width), dtype=bool)
    inside[p.vision : p.height - p.vision, p.vision : p.width - p.vision] = True
    return inside.reshape(-1)


def _map_problem(state, p) -> str | None:
    """Wall exactly on the border (every move and window stays on the map), no tile a move
    cannot make, ``tiles`` the snake-blind copy of ``grid``, the food counted."""
    grid = state["grid"]
    bad = (grid == WALL) == _inside_mask(p)
    if bad.any():
        i, cell = _first(bad)
        return (
            f"env {i}: grid[{cell}] = {grid[i, cell]}; the outer vision = {p.vision} rows and "
            f"columns are wall ({WALL}) and the inside is not"
        )
    bad = grid == OWN
    if bad.any():
        i, cell = _first(bad)
        return f"env {i}: grid[{cell}] = {OWN}; valid: 0 to 3 or a snake's {SNAKE} + k"
    bad = state["tiles"] != np.minimum(grid, SNAKE)
    if bad.any():
        i, cell = _first(bad)
        return (
            f"env {i}: tiles[{cell}] = {state['tiles'][i, cell]} with grid[{cell}] = "
            f"{grid[i, cell]}; tiles is grid with every snake as {SNAKE}"
        )
    food = (grid == FOOD).sum(axis=1)
    bad = food != state["food_count"]
    if bad.any():
        (i,) = _first(bad)
        return f"env {i}: food_count = {state['food_count'][i]} but the map holds {food[i]} food"
    return None


def _snake_problem(state, p) -> str | None:
    """Each living snake's ``length`` ring cells from ``head_slot`` back are neighbours, its
    own on the grid and nobody else's, its head at ``head``; an agent's head is inside even
    between lives (its window is observed)."""
    grid, length, head = state["grid"], state["length"], state["head"]
    max_length = p.max_snake_length
    slots = (state["head_slot"][..., None] - np.arange(max_length)) % max_length  # head first
    ring = np.take_along_axis(state["body"], slots, axis=2).astype(np.int64)  # (N, S, L)
    used = np.arange(max_length) < length[..., None]
    envs, snakes, _ = np.indices(ring.shape)
    bad = used & (grid[envs, ring] != SNAKE + snakes)
    if bad.any():
        i, k, j = _first(bad)
        return (
            f"env {i}: snake {k}'s body holds cell {ring[i, k, j]} where grid = "
            f"{grid[i, ring[i, k, j]]}; snake k's cells are {SNAKE} + k on the grid"
        )
    held = np.zeros(grid.shape, dtype=np.int64)  # times the bodies hold each cell
    np.add.at(held, (envs[used], ring[used]), 1)
    bad = held != (grid >= SNAKE)
    if bad.any():
        i, cell = _first(bad)
        return f"env {i}: grid[{cell}] = {grid[i, cell]} and {held[i, cell]} body cells are there"
    bad = (length > 0) & (head != ring[..., 0])
    if bad.any():
        i, k = _first(bad)
        return f"env {i}: snake {k} head = {head[i, k]} but its body's head is {ring[i, k, 0]}"
    bad = ~_inside_mask(p)[head[:, : p.num_snakes]]
    if bad.any():
        i, k = _first(bad)
        return f"env {i}: agent snake {k} head = {head[i, k]} is not inside the walls"
    gap = np.abs(np.diff(ring, axis=2))
    bad = used[..., 1:] & (gap != 1) & (gap != p.width)
    if bad.any():
        i, k, j = _first(bad)
        return (
            f"env {i}: snake {k}'s body cells {ring[i, k, j]} and {ring[i, k, j + 1]} are not "
            "neighbours"
        )
    return None


def check_state(state, params) -> str | None:
    """The invariants the step relies on, for state from a file (the fields' bounds hold):
    see ``_map_problem`` and ``_snake_problem``."""
    return _map_problem(state, params) or _snake_problem(state, params)


# ------------------------------------------------------------------------------- render

_GLYPHS = {EMPTY: ".", FOOD: "*", CORPSE: "x", WALL: "#"}


def render_text(state, params, crop: int = 48) -> str:
    """The map, one character per cell: '#' wall, '*' food, 'x' corpse, '.' empty, snake k as
    'A' + k (its head in upper case, body in lower case; k >= 26 as '@'/'o'). A map larger than
    ``crop`` is cropped to the ``crop`` x ``crop`` square around snake 0's head."""
    h, w = params.height, params.width
    grid = np.asarray(state["grid"]).reshape(h, w)
    snakes = params.num_snakes + params.max_bots  # agents, then bots
    heads = {int(state["head"][k]): k for k in range(snakes) if state["length"][k] > 0}
    r0, c0, r1, c1 = 0, 0, h, w
    if h > crop or w > crop:
        hr, hc = divmod(int(state["head"][0]), w)
        r0 = min(max(hr - crop // 2, 0), max(h - crop, 0))
        c0 = min(max(hc - crop // 2, 0), max(w - crop, 0))
        r1, c1 = min(r0 + crop, h), min(c0 + crop, w)
    rows = []
    for r in range(r0, r1):
        line = []
        for c in range(c0, c1):
            tile = int(grid[r, c])
            if tile >= SNAKE:
                k = tile - SNAKE
                letter = chr(ord("a") + k) if k < 26 else "o"
                head = heads.get(r * w + c) == k
                line.append((letter.upper() if k < 26 else "@") if head else letter)
            else:
                line.append(_GLYPHS[tile])
        rows.append("".join(line))
    if (r0, c0, r1, c1) != (0, 0, h, w):
        rows.append(f"(rows {r0}-{r1 - 1}, columns {c0}-{c1 - 1} of {h}x{w}, around snake 0)")
    return "\n".join(rows)


# colours of map tiles (empty, food, corpse, wall), then snakes' bodies and heads by index
_TILE_RGB = np.array([[20, 20, 28], [230, 60, 60], [120, 80, 60], [110, 110, 120]], np.uint8)
_SNAKE_RGB = np.array(
    [
        [60, 170, 80],
        [70, 130, 220],
        [220, 180, 50],
        [180, 90, 200],
        [60, 190, 190],
        [230, 130, 60],
        [150, 150, 150],
        [200, 90, 120],
    ],
    dtype=np.uint8,
)


def render_rgb(state, obs, params) -> np.ndarray:
    """uint8 ``(height, width, 3)``, one pixel per cell: dark floor, red food, brown corpses,
    grey walls; snake k in colour k % 8 (agent 0 green), its head lighter."""
    h, w = params.height, params.width
    grid = np.asarray(state["grid"]).reshape(h, w).astype(np.int64)
    image = np.empty((h, w, 3), dtype=np.uint8)
    tiles = grid < SNAKE
    image[tiles] = _TILE_RGB[np.minimum(grid[tiles], len(_TILE_RGB) - 1)]
    image[~tiles] = _SNAKE_RGB[(grid[~tiles] - SNAKE) % len(_SNAKE_RGB)]
    for k in range(params.num_snakes + params.max_bots):
        if state["length"][k] > 0:
            r, c = divmod(int(state["head"][k]), w)
            colour = _SNAKE_RGB[k % len(_SNAKE_RGB)].astype(np.int64)
            image[r, c] = (colour + 255) // 2  # halfway to white
    return image


SPEC = GameSpec(
    name="arena",
    params_cls=ArenaParams,
    state=STATE,
    obs_shape=lambda p: (2 * p.vision + 1, 2 * p.vision + 1),
    obs_dtype=np.uint8,
    num_actions=4,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
    num_agents=lambda p: p.num_snakes,
    observe=observe,
    reset_agent=reset_agent,
    obs_categories=OBS_CODES,
    choices={"bot_policy": BOT_POLICIES},
    check_state=check_state,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.arena [num_envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, ArenaParams(), sys.argv[1:])

"""Arena, hand-worked: each rule of the docstring on a 10x10 map with vision 2, so rows and
columns 0, 1, 8 and 9 are wall and the inside is rows and columns 2..7."""

from __future__ import annotations

import numpy as np
import pytest

import fasttrain
from fasttrain.games.arena import SPEC
from fasttrain.kernels.statecheck import state_problem
from tests.fasttrain.kernels.test_statecheck import state_refusal

# tiles and observation codes as the docstring documents them (written out, not imported)
EMPTY, FOOD, CORPSE, WALL, SNAKE = 0, 1, 2, 3, 5  # map tiles, from the docstring
S0, S1, S2 = SNAKE, SNAKE + 1, SNAKE + 2
OWN, OTHER = 4, 5
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
DELTA = {UP: (-1, 0), DOWN: (1, 0), LEFT: (0, -1), RIGHT: (0, 1)}
OPPOSITE = {UP: DOWN, DOWN: UP, LEFT: RIGHT, RIGHT: LEFT}


@pytest.fixture(params=["python", "cpu"])
def backend(request):
    return request.param


def make(backend="cpu", **params):
    """One arena env, 10x10 with vision 2 and 2 snakes unless overridden; no food unless a test
    asks (each step tops the food up to num_food, which would put a random piece on the map)."""
    params = {"width": 10, "height": 10, "vision": 2, "num_snakes": 2, "num_food": 0, **params}
    return fasttrain.make("arena", num_envs=1, backend=backend, seed=0, **params)


def place(env, snakes, food=(), corpse=(), walls=(), steps=None, first_slot=0):
    """Clear env 0 to its border walls and an empty inside, then put snake k on ``snakes[k]``
    ((row, col) cells, tail first; [] waits to respawn, its last head at the map's centre), the
    food, corpse and extra wall tiles; ``steps`` {k: steps in the life}. ``snakes`` lists the
    agents, then every bot slot. Episode sums, the bots' scores and their summed lives restart;
    the food count is the food placed."""
    st, p = env.state, env.params
    h, w, v = p.height, p.width, p.vision
    assert len(snakes) == p.num_snakes + p.max_bots
    grid = np.full((h, w), WALL, np.int16)
    grid[v : h - v, v : w - v] = EMPTY
    for tile, where in ((FOOD, food), (CORPSE, corpse), (WALL, walls)):
        for r, c in where:
            grid[r, c] = tile
    for k, body in enumerate(snakes):
        for j, (r, c) in enumerate(body):
            assert grid[r, c] == EMPTY, (r, c)
            grid[r, c] = SNAKE + k
            st["body"][0, k, (first_slot + j) % p.max_snake_length] = r * w + c
        st["head_slot"][0, k] = (first_slot + len(body) - 1) % p.max_snake_length
        r, c = body[-1] if body else (h // 2, w // 2)
        st["head"][0, k] = r * w + c
        st["length"][0, k] = len(body)
        st["steps"][0, k] = (steps or {}).get(k, 0)
    st["grid"][0] = grid.ravel()
    st["tiles"][0] = np.minimum(grid, SNAKE).ravel()  # every snake as SNAKE, as documented
    st["missing_food"][0] = 0
    st["food_count"][0] = int((grid == FOOD).sum())
    st["bot_score"][0] = 0
    for name in ("bot_done_food", "bot_done_steps", "bot_done_lives"):
        st[name][0] = 0
    for name in ("score", "ep_return", "ep_length"):
        env.arrays[name][:] = 0


def step(env, *actions):
    """Step env 0 with one action per snake; (reward, terminated, truncated) per snake."""
    _, rewards, terminated, truncated = env.step(np.array(actions))
    return [
        (float(rewards[k]), bool(terminated[k]), bool(truncated[k])) for k in range(len(actions))
    ]


def cells(env, k, i=0):
    """Snake k of env i as (row, col) cells, tail first, read from its ring buffer."""
    st, p = env.state, env.params
    head, n = int(st["head_slot"][i, k]), int(st["length"][i, k])
    slots = [(head - j) % p.max_snake_length for j in range(n - 1, -1, -1)]
    return [divmod(int(st["body"][i, k, s]), p.width) for s in slots]


def tiles(env, i=0) -> dict:
    """The inside of env i's map as {(row, col): tile}, empty cells left out."""
    p = env.params
    grid, v = env.state["grid"][i].reshape(p.height, p.width), p.vision
    inside = [(r, c) for r in range(v, p.height - v) for c in range(v, p.width - v)]
    return {cell: int(grid[cell]) for cell in inside if grid[cell] != EMPTY}


def window(p, inside, head, k):
    """The observation the docstring specifies for snake k with its head at ``head``, on a map
    whose inside is ``inside`` ({(row, col): tile}) and whose border is wall."""
    v = p.vision
    obs = np.zeros((2 * v + 1, 2 * v + 1), np.uint8)
    for i in range(2 * v + 1):
        for j in range(2 * v + 1):
            r, c = head[0] - v + i, head[1] - v + j
            on_inside = v <= r < p.height - v and v <= c < p.width - v
            tile = inside.get((r, c), EMPTY) if on_inside else WALL
            obs[i, j] = tile if tile < SNAKE else OWN if tile == SNAKE + k else OTHER
    return obs


def check_respawn(env, k, expected):
    """Snake k was respawned, length 1 and steps 0, on a cell that is EMPTY or CORPSE in
    ``expected`` (the inside after the moves); the map is ``expected`` plus that cell, and its
    observation is centred there."""
    p, st = env.params, env.state
    cell = divmod(int(st["head"][0, k]), p.width)
    assert expected.get(cell, EMPTY) in (EMPTY, CORPSE)
    assert cells(env, k) == [cell] and int(st["steps"][0, k]) == 0
    now = {**expected, cell: SNAKE + k}
    assert tiles(env) == now
    np.testing.assert_array_equal(env.obs[k].numpy(), window(p, now, cell, k))


# ------------------------------------------------------------------------------- moves


@pytest.mark.parametrize(
    "action, head", [(UP, (3, 4)), (DOWN, (5, 4)), (LEFT, (4, 3)), (RIGHT, (4, 5))]
)
def test_each_action_moves_the_head(backend, action, head):
    env = make(backend)
    dr, dc = DELTA[(action + 2) % 4]  # approach (4, 4) at a right angle: the action is a turn
    place(env, [[(4 - dr, 4 - dc), (4, 4)], [(7, 7)]])
    assert step(env, action, UP) == [(0.0, False, False)] * 2
    assert cells(env, 0) == [(4, 4), head] and cells(env, 1) == [(6, 7)]
    expected = {(4, 4): S0, head: S0, (6, 7): S1}  # the tails left their cells
    assert tiles(env) == expected
    assert env.state["steps"][0].tolist() == [1, 1]
    np.testing.assert_array_equal(env.obs[0].numpy(), window(env.params, expected, head, 0))


@pytest.mark.parametrize("first_slot", [0, 63])  # 63: neck in the ring's last slot, head in 0
@pytest.mark.parametrize("heading", [UP, DOWN, LEFT, RIGHT])
def test_action_into_the_neck_keeps_going_straight(backend, heading, first_slot):
    env = make(backend)
    dr, dc = DELTA[heading]
    place(env, [[(4 - dr, 4 - dc), (4, 4)], [(7, 7)]], first_slot=first_slot)
    assert step(env, OPPOSITE[heading], UP)[0] == (0.0, False, False)
    assert cells(env, 0) == [(4, 4), (4 + dr, 4 + dc)]


def test_a_single_cell_has_no_neck(backend):
    env = make(backend)
    place(env, [[(4, 4)], [(7, 7)]])
    assert step(env, LEFT, UP)[0] == (0.0, False, False)
    assert step(env, RIGHT, UP)[0] == (0.0, False, False)  # straight back
    assert cells(env, 0) == [(4, 4)]


# ------------------------------------------------------------------------------- processing order


@pytest.mark.parametrize("first", ["above", "right"])
def test_two_heads_into_one_cell_the_lower_index_gets_it(backend, first):
    """Snakes come into (4, 4) from above and from the right; snake 0 wins either way."""
    env = make(backend, reward_death=-2.5)
    above, right = [(2, 4), (3, 4)], [(4, 6), (4, 5)]
    snakes, actions = (
        ([above, right], [DOWN, LEFT]) if first == "above" else ([right, above], [LEFT, DOWN])
    )
    place(env, snakes)
    assert step(env, *actions) == [(0.0, False, False), (-2.5, True, False)]
    assert cells(env, 0) == [snakes[0][1], (4, 4)]
    # snake 1 is removed where it stood; its head, two cells from its tail, turns corpse
    expected = {snakes[0][1]: S0, (4, 4): S0, snakes[1][1]: CORPSE}
    final = window(env.params, expected, snakes[1][1], 1)
    np.testing.assert_array_equal(env.final_obs[1].numpy(), final)
    check_respawn(env, 1, expected)


def test_head_on_adjacent_the_first_dies_and_the_second_eats_its_corpse(backend):
    env = make(backend, reward_death=-2.5, reward_corpse=0.25)
    place(env, [[(4, 3), (4, 4)], [(4, 6), (4, 5)]])
    # snake 0 runs into snake 1's head and is removed, its head cell (4, 4) turning corpse;
    # snake 1 then moves into that freed cell and eats the corpse
    assert step(env, RIGHT, LEFT) == [(-2.5, True, False), (0.25, False, False)]
    assert cells(env, 1) == [(4, 6), (4, 5), (4, 4)]
    assert env.arrays["score"].tolist() == [0.0, 1.0]
    expected = {(4, 6): S1, (4, 5): S1, (4, 4): S1}
    final = env.final_obs[0].numpy()  # around snake 0's last head, now snake 1's
    np.testing.assert_array_equal(final, window(env.params, expected, (4, 4), 0))
    assert final[2, 2] == OTHER
    check_respawn(env, 0, expected)


def test_head_on_with_one_cell_between_the_first_takes_it(backend):
    env = make(backend, reward_death=-2.5)
    place(env, [[(4, 2), (4, 3)], [(4, 6), (4, 5)]])
    assert step(env, RIGHT, LEFT) == [(0.0, False, False), (-2.5, True, False)]
    expected = {(4, 3): S0, (4, 4): S0, (4, 5): CORPSE}
    final = window(env.params, expected, (4, 5), 1)
    np.testing.assert_array_equal(env.final_obs[1].numpy(), final)
    check_respawn(env, 1, expected)


@pytest.mark.parametrize("leader", [0, 1])
def test_following_a_tail_needs_the_leader_to_move_first(backend, leader):
    """The follower heads into the cell the leader's tail leaves this step."""
    env = make(backend, reward_death=-2.5)
    lead, follow = [(4, 5), (4, 6)], [(4, 3), (4, 4)]
    place(env, [lead, follow] if leader == 0 else [follow, lead])
    result = step(env, RIGHT, RIGHT)
    if leader == 0:
        assert result == [(0.0, False, False)] * 2
        assert tiles(env) == {(4, 6): S0, (4, 7): S0, (4, 4): S1, (4, 5): S1}
    else:  # the leader's tail is still there when snake 0 moves
        assert result == [(-2.5, True, False), (0.0, False, False)]
        check_respawn(env, 0, {(4, 4): CORPSE, (4, 6): S1, (4, 7): S1})


# ------------------------------------------------------------------------------- eating


def test_eating_food_grows_scores_and_keeps_the_food_count(backend):
    env = make(backend, num_food=3, reward_food=0.5)
    food = [(4, 5), (7, 6), (2, 2)]
    place(env, [[(4, 3), (4, 4)], [(7, 7)]], food=food)
    # snake 1 eats too, so no new food can land on a cell a snake moves into this step
    assert step(env, RIGHT, LEFT) == [(0.5, False, False)] * 2
    assert cells(env, 0) == [(4, 3), (4, 4), (4, 5)] and cells(env, 1) == [(7, 7), (7, 6)]
    assert env.arrays["score"].tolist() == [1.0, 1.0]
    now = tiles(env)
    new_food = {cell for cell, tile in now.items() if tile == FOOD} - {(2, 2)}
    assert now[(2, 2)] == FOOD and len(new_food) == 2
    assert not new_food & {(4, 3), (4, 4), (7, 7), *food}  # on cells that were empty
    snakes = {(4, 3): S0, (4, 4): S0, (4, 5): S0, (7, 7): S1, (7, 6): S1}
    assert {cell: tile for cell, tile in now.items() if tile != FOOD} == snakes
    assert int(env.state["missing_food"][0]) == 0


def test_eating_a_corpse_grows_scores_and_spawns_no_food(backend):
    env = make(backend, num_food=1, reward_food=0.5, reward_corpse=0.25)
    place(env, [[(4, 3), (4, 4)], [(7, 7)]], food=[(2, 2)], corpse=[(4, 5), (5, 5)])
    assert step(env, RIGHT, UP) == [(0.25, False, False), (0.0, False, False)]
    assert cells(env, 0) == [(4, 3), (4, 4), (4, 5)]
    assert env.arrays["score"].tolist() == [1.0, 0.0]
    expected = {(4, 3): S0, (4, 4): S0, (4, 5): S0, (6, 7): S1, (2, 2): FOOD, (5, 5): CORPSE}
    assert tiles(env) == expected


@pytest.mark.parametrize(
    "body", [[(4, 3), (4, 4)], [(4, 2), (4, 3), (4, 4)]], ids=["grows to the cap", "at the cap"]
)
def test_max_snake_length_caps_growth(backend, body):
    env = make(backend, max_snake_length=3, num_food=2, reward_food=0.5)
    place(env, [body, [(7, 7)]], food=[(4, 5), (7, 6)])
    assert step(env, RIGHT, LEFT) == [(0.5, False, False)] * 2
    assert cells(env, 0) == [(4, 3), (4, 4), (4, 5)]  # the tail moves on at the cap
    assert env.arrays["score"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "max_len, body, food",
    [(1, [(4, 4)], []), (3, [(4, 2), (4, 3), (4, 4)], []), (3, [(4, 2), (4, 3), (4, 4)], [(4, 5)])],
)
def test_a_snake_at_max_length_frees_its_tail_cell(backend, max_len, body, food):
    env = make(backend, max_snake_length=max_len)
    place(env, [body, [(7, 7)]], food=food)
    step(env, RIGHT, UP)
    assert {cell for cell, tile in tiles(env).items() if tile == S0} == {*body[1:], (4, 5)}


# ------------------------------------------------------------------------------- death, respawn

DEATHS = {  # snake 0 tail first, its action, the cells with an even count to the tail
    "wall": ([(4, 4), (3, 4), (2, 4)], UP, [(3, 4)]),
    "body": ([(3, 3), (3, 4), (3, 5), (4, 5), (4, 4)], UP, [(3, 4), (4, 5)]),
    "own tail": ([(3, 4), (3, 5), (4, 5), (4, 4)], UP, [(3, 5), (4, 4)]),  # it leaves too late
}


@pytest.mark.parametrize("leave_corpse", [True, False])
@pytest.mark.parametrize("case", list(DEATHS))
def test_death_removes_the_snake_and_respawns_it(backend, case, leave_corpse):
    body, action, corpse = DEATHS[case]
    env = make(backend, reward_death=-2.5, leave_corpse_on_death=leave_corpse)
    place(env, [body, [(7, 7)]])
    assert step(env, action, UP) == [(-2.5, True, False), (0.0, False, False)]
    expected = {(6, 7): S1, **({cell: CORPSE for cell in corpse} if leave_corpse else {})}
    final = window(env.params, expected, body[-1], 0)  # around the last head, body removed
    np.testing.assert_array_equal(env.final_obs[0].numpy(), final)
    check_respawn(env, 0, expected)
    assert env.stats() == {"return": -2.5, "length": 1.0, "score": 0.0, "episodes": 1}


@pytest.mark.parametrize("free_corpse", [False, True])
def test_a_waiting_snake_respawns_only_onto_a_free_cell(backend, free_corpse):
    """All of the inside is wall but snake 0, the corpse it eats and maybe a corpse at (6, 6);
    snake 1 waits to respawn: it keeps waiting, or lands on that corpse."""
    env = make(backend, reward_corpse=0.25)
    keep = {(4, 4), (4, 5), (6, 6)} if free_corpse else {(4, 4), (4, 5)}
    walls = [(r, c) for r in range(2, 8) for c in range(2, 8) if (r, c) not in keep]
    place(env, [[(4, 4)], []], corpse=sorted(keep - {(4, 4)}), walls=walls)
    assert step(env, RIGHT, UP) == [(0.25, False, False), (0.0, True, False)]
    assert cells(env, 0) == [(4, 4), (4, 5)]
    if not free_corpse:
        assert int(env.state["length"][0, 1]) == 0
        assert step(env, RIGHT, UP)[1] == (0.0, True, False)  # terminated again, still waiting
        return
    assert cells(env, 1) == [(6, 6)] and int(env.state["steps"][0, 1]) == 0
    expected = np.full((5, 5), WALL, np.uint8)  # rows 4..8, columns 4..8
    expected[0, :2] = OTHER
    expected[2, 2] = OWN
    np.testing.assert_array_equal(env.obs[1].numpy(), expected)


# ------------------------------------------------------------------------------- observation


def test_observation_at_the_wall_and_own_versus_other():
    """Snake 0 ends in the top-left corner of the inside, snake 1 next to it, snake 2 in the
    bottom-right corner."""
    env = make("cpu", num_snakes=3)
    place(
        env,
        [[(4, 2), (3, 2)], [(4, 3), (4, 4)], [(5, 7), (6, 7)]],
        food=[(2, 4)],
        corpse=[(3, 3)],
    )
    assert step(env, UP, UP, DOWN) == [(0.0, False, False)] * 3
    obs = env.obs.numpy()
    # head (2, 2): rows 0..4 and columns 0..4 of the map
    snake_0 = [[3, 3, 3, 3, 3], [3, 3, 3, 3, 3], [3, 3, 4, 0, 1], [3, 3, 4, 2, 5], [3, 3, 0, 0, 5]]
    # head (3, 4): rows 1..5, columns 2..6
    snake_1 = [[3, 3, 3, 3, 3], [5, 0, 1, 0, 0], [5, 2, 4, 0, 0], [0, 0, 4, 0, 0], [0, 0, 0, 0, 0]]
    # head (7, 7): rows 5..9, columns 5..9
    snake_2 = [[0, 0, 0, 3, 3], [0, 0, 4, 3, 3], [0, 0, 4, 3, 3], [3, 3, 3, 3, 3], [3, 3, 3, 3, 3]]
    for k, expected in enumerate([snake_0, snake_1, snake_2]):
        np.testing.assert_array_equal(obs[k], np.array(expected, np.uint8), err_msg=f"snake {k}")


# ------------------------------------------------------------------------------- food count


def test_food_without_room_spawns_first_thing_next_step(backend):
    """An inside of 3 rows (2..4) by 2 columns (2..3), full."""
    env = make(
        backend,
        width=6,
        height=7,
        num_food=3,
        leave_corpse_on_death=False,
        reward_food=0.5,
        reward_death=-2.5,
    )
    place(env, [[(2, 2)], [(4, 2), (4, 3)]], food=[(2, 3), (3, 2), (3, 3)])
    # snake 0 eats with no free cell for the new food; snake 1 then dies into the bottom wall
    assert step(env, RIGHT, DOWN) == [(0.5, False, False), (-2.5, True, False)]
    assert int(env.state["missing_food"][0]) == 1
    (x,) = cells(env, 1)
    assert x in [(4, 2), (4, 3)]
    assert tiles(env) == {(2, 2): S0, (2, 3): S0, (3, 2): FOOD, (3, 3): FOOD, x: S1}
    # the missing food takes the one free cell before anyone moves; snake 0 then dies into the
    # top wall and snake 1 eats the food above it, whose replacement goes where snake 0 was
    assert step(env, UP, UP) == [(-2.5, True, False), (0.5, False, False)]
    assert int(env.state["missing_food"][0]) == 0
    now = tiles(env)
    assert now[(4, 5 - x[1])] == FOOD and now[(3, 5 - x[1])] == FOOD
    assert cells(env, 1) == [x, (3, x[1])]
    (y,) = cells(env, 0)
    assert y in [(2, 2), (2, 3)] and now[(2, 5 - y[1])] == FOOD and len(now) == 6


def test_food_count_and_bodies_stay_consistent_under_random_play():
    env = fasttrain.make(
        "arena",
        num_envs=8,
        backend="cpu",
        seed=3,
        width=10,
        height=10,
        vision=2,
        num_snakes=3,
        num_food=5,
    )
    st, gen = env.state, np.random.default_rng(4)
    border = np.ones((10, 10), bool)
    border[2:8, 2:8] = False
    deaths = meals = 0
    for _ in range(300):
        _, rewards, terminated, _ = env.step(gen.integers(0, 4, env.num_rows))
        deaths, meals = deaths + int(terminated.sum()), meals + int((rewards > 0).sum())
        for i in range(8):
            grid = st["grid"][i].reshape(10, 10)
            assert (grid[border] == WALL).all() and (grid[~border] != WALL).all()
            assert int((grid == FOOD).sum()) == 5 and int(st["missing_food"][i]) == 0
            # the windows' view: the same map with every snake as SNAKE
            np.testing.assert_array_equal(st["tiles"][i], np.minimum(st["grid"][i], SNAKE))
            for k in range(3):
                body = cells(env, k, i)
                assert len(body) >= 1
                assert sorted(zip(*np.nonzero(grid == SNAKE + k), strict=True)) == sorted(body)
                for (r0, c0), (r1, c1) in zip(body, body[1:], strict=False):
                    assert abs(r0 - r1) + abs(c0 - c1) == 1
                assert env.obs[3 * i + k, 2, 2] == OWN
    assert deaths > 50 and meals > 20  # the rules above were exercised


# ------------------------------------------------------------------------------- time limit


def test_max_episode_steps_truncates_with_the_pre_respawn_window(backend):
    env = make(backend, max_episode_steps=3)
    place(env, [[(4, 3), (4, 4)], [(7, 7)]], steps={0: 2})
    assert step(env, RIGHT, UP) == [(0.0, False, True), (0.0, False, False)]
    expected = {(4, 4): S0, (4, 5): S0, (6, 7): S1}
    np.testing.assert_array_equal(env.final_obs[0].numpy(), window(env.params, expected, (4, 5), 0))
    (head,) = cells(env, 0)
    assert head not in expected and env.state["steps"][0].tolist() == [0, 1]
    assert env.obs[0, 2, 2] == OWN and tiles(env)[head] == S0
    assert env.stats() == {"return": 0.0, "length": 1.0, "score": 0.0, "episodes": 1}


def test_a_death_at_the_time_limit_is_terminated_not_truncated(backend):
    env = make(backend, max_episode_steps=3, reward_death=-2.5)
    place(env, [[(3, 2), (2, 2)], [(7, 7)]], steps={0: 2})
    assert step(env, UP, UP)[0] == (-2.5, True, False)


def test_a_truncated_snake_leaves_no_body_behind(backend):
    env = make(backend, max_episode_steps=3)
    place(env, [[(4, 3), (4, 4)], [(7, 7)]], steps={0: 2})
    assert step(env, RIGHT, UP)[0] == (0.0, False, True)
    (head,) = cells(env, 0)
    assert {cell for cell, tile in tiles(env).items() if tile == S0} == {head}


# ------------------------------------------------------------------------------- params, render


@pytest.mark.parametrize(
    "params, message",
    [
        ({"vision": 0}, "vision must be >= 1"),
        ({"width": 3}, r"at least 2\*vision\+2 = 8, got 3x24"),
        ({"height": 9, "vision": 4}, r"at least 2\*vision\+2 = 10, got 24x9"),
        ({"num_snakes": 0}, "needs num_snakes >= 1"),
        ({"num_food": -1}, "num_food"),
        ({"max_snake_length": 0}, "max_snake_length >= 1"),
        ({"max_episode_steps": -1}, "max_episode_steps must be >= 0"),
        ({"width": 8, "height": 8, "vision": 3, "num_snakes": 2, "num_food": 3}, "on 4 free"),
    ],
)
def test_invalid_params_raise(params, message):
    with pytest.raises(ValueError, match=message):
        fasttrain.make("arena", num_envs=1, **params)


def test_render_draws_the_map():
    env = make("cpu")
    place(env, [[(4, 3), (4, 4)], [(7, 6), (6, 6), (6, 7)]], food=[(2, 2)], corpse=[(7, 3)])
    rows = ["##########"] * 2 + ["##*.....##", "##......##", "##.aA...##", "##......##"]
    rows += ["##....bB##", "##.x..b.##"] + ["##########"] * 2
    assert env.render(0) == "\n".join(rows)


@pytest.mark.parametrize(
    "height, width, head, top_left",
    [
        (60, 60, (30, 40), (6, 12)),
        (60, 60, (3, 3), (0, 0)),
        (60, 60, (57, 57), (12, 12)),
        (20, 60, (10, 40), (0, 12)),
    ],
)
def test_render_crops_a_large_map_around_snake_0(height, width, head, top_left):
    env = make("cpu", height=height, width=width)
    tail = (head[0], head[1] - 1)
    place(env, [[tail, head], [(10, 10)]], food=[(30, 30)] if height > 30 else [(15, 30)])
    picture = np.full((height, width), "#")
    picture[2:-2, 2:-2] = "."
    picture[tail], picture[head], picture[10, 10] = "a", "A", "B"
    picture[(30, 30) if height > 30 else (15, 30)] = "*"
    r0, c0 = top_left
    r1, c1 = min(r0 + 48, height), c0 + 48
    lines = env.render(0).split("\n")
    assert lines[:-1] == ["".join(row) for row in picture[r0:r1, c0:c1]]
    assert (
        lines[-1]
        == f"(rows {r0}-{r1 - 1}, columns {c0}-{c1 - 1} of {height}x{width}, around snake 0)"
    )


# ------------------------------------------------------------------------------- state from a file

PLAYED = [  # full-length snakes and a bot slot never used / crowded maps, waiting snakes, time-outs
    dict(
        width=8,
        height=8,
        vision=1,
        num_snakes=3,
        num_food=6,
        max_snake_length=5,
        max_bots=2,
        num_bots=1,
        bot_policy="random",
    ),
    dict(
        width=7,
        height=7,
        vision=1,
        num_snakes=4,
        num_food=10,
        max_snake_length=16,
        max_bots=3,
        num_bots=3,
        bot_policy="cautious",
        max_episode_steps=30,
        leave_corpse_on_death=False,
    ),
]


@pytest.mark.parametrize("params", PLAYED)
def test_every_state_random_play_reaches_loads(params):
    """Guards the bounds against being tighter than the game, with the bots and the food changed
    between steps as a curriculum does (states from the earlier stage's params are in flight)."""
    env = fasttrain.make("arena", num_envs=16, backend="cpu", seed=3, **params)
    gen = np.random.default_rng(4)
    seen = {"waiting": 0, "full": 0, "ended": 0}
    for t in range(900):
        if t in (300, 600):
            stage = {"num_bots": 0, "num_food": 1} if t == 300 else {"num_bots": params["max_bots"]}
            env.set_params(**{**params, **stage})
        env.step(gen.integers(0, 4, env.num_rows))
        length = env.state["length"]
        seen["waiting"] += int((length[:, : params["num_snakes"]] == 0).sum())
        seen["full"] += int((length == params["max_snake_length"]).sum())
        seen["ended"] += int((env.terminated | env.truncated).sum())
        if t % 5 == 0:
            state = env.state_dict()
            assert state_problem(SPEC, SPEC.make_params(**params), state, 4) is None, t
    assert seen["full" if params["max_snake_length"] == 5 else "waiting"] > 0
    assert seen["ended"] > 100


@pytest.fixture
def placed():
    """10x10, vision 2: agent 0 a-A, agent 1 b-b-B, bot c, a food and a corpse."""
    env = make(max_bots=1, num_bots=1)
    place(env, [[(4, 3), (4, 4)], [(6, 6), (6, 7), (5, 7)], [(3, 6)]], [(2, 2)], [(7, 3)])
    return env


def _refused(env, change) -> str:
    """The one-line refusal of ``env``'s state with ``change`` applied (nothing written)."""
    message = state_refusal(env, change)
    assert message.startswith("game 'arena' state, env 0: ")
    return message


def _put(**values):
    """A change that writes ``name=(index, value)`` (env 0), or ``name=value`` for a scalar."""

    def change(state):
        for name, value in values.items():
            index, value = value if isinstance(value, tuple) else ((), value)
            state[name][(0, *index)] = value

    return change


@pytest.mark.parametrize(
    ("name", "index", "value", "valid"),
    [
        ("grid", (0,), -1, "0 to 7"),  # 2 agents and 1 bot: snakes are 5, 6 and 7
        ("grid", (23,), 8, "0 to 7"),
        ("tiles", (23,), 6, "0 to 5"),
        ("body", (0, 5), -1, "0 to 99"),  # a slot no snake uses: every slot is a cell
        ("body", (1, 0), 100, "0 to 99"),
        ("body", (1, 0), 2_000_000_000, "0 to 99"),
        ("head_slot", (0,), -1, "0 to 63"),
        ("head_slot", (2,), 64, "0 to 63"),
        ("head", (1,), -1, "0 to 99"),
        ("head", (2,), 100, "0 to 99"),
        ("length", (0,), -1, "0 to 64"),
        ("length", (1,), 65, "0 to 64"),
        ("steps", (0,), -1, "0 to 1073741824"),
        ("missing_food", (), -1, "0 to 36"),
        ("missing_food", (), 37, "0 to 36"),
        ("food_count", (), -2_000_000_000, "0 to 36"),  # the step's top-up loop would not end
        ("food_count", (), 37, "0 to 36"),
        ("bot_score", (0,), -1, "0 to 1073741824"),
        ("bot_done_food", (), -1.0, "0 to any"),
        ("bot_done_steps", (), -1.0, "0 to any"),
        ("bot_done_lives", (), np.nan, "0 to any"),
    ],
)
def test_a_field_outside_its_range_is_refused(placed, name, index, value, valid):
    message = _refused(placed, _put(**{name: (index, value)}))
    assert message.endswith(f"{name} = {value!r}; valid: {valid}")


def _waiting_on_the_wall(state):
    """Agent 0 between lives (its cells cleared), its last head on the wall: its window would
    be read off the map."""
    _put(length=((0,), 0), head=((0,), 0))(state)
    for cell in (43, 44):
        _put(grid=((cell,), EMPTY), tiles=((cell,), EMPTY))(state)


def _swap_body(state):
    state["body"][0, 1, [0, 1]] = state["body"][0, 1, [1, 0]]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_put(grid=((0,), EMPTY), tiles=((0,), EMPTY)), "grid[0] = 0; the outer vision = 2 rows"),
        (_put(grid=((23,), WALL), tiles=((23,), WALL)), "grid[23] = 3; the outer vision = 2 "),
        (_put(grid=((23,), OWN), tiles=((23,), OWN)), "grid[23] = 4; valid: 0 to 3 or a snake"),
        (_put(tiles=((43,), EMPTY)), "tiles[43] = 0 with grid[43] = 5; tiles is grid with every"),
        (_put(food_count=2), "food_count = 2 but the map holds 1 food"),
        (_put(grid=((43,), S1)), "snake 0's body holds cell 43 where grid = 6; snake k's cells"),
        (_put(grid=((23,), S0), tiles=((23,), SNAKE)), "grid[23] = 5 and 0 body cells are there"),
        (_put(body=((1, 1), 66)), "grid[66] = 6 and 2 body cells are there"),
        (_put(head=((0,), 43)), "snake 0 head = 43 but its body's head is 44"),
        (_waiting_on_the_wall, "agent snake 0 head = 0 is not inside the walls"),
        (_swap_body, "snake 1's body cells 57 and 66 are not neighbours"),
    ],
)
def test_a_state_against_the_game_s_invariants_is_refused(placed, change, says):
    assert says in _refused(placed, change)


def test_a_refused_state_never_reaches_the_step(placed):
    """After the refusal the env steps on from its own state, as if nothing had been offered."""
    twin = make(max_bots=1, num_bots=1)
    twin.load_state_dict(placed.state_dict())
    _refused(placed, _put(food_count=-2_000_000_000))
    for env in (placed, twin):
        env.step(np.array([UP, LEFT]))
    for name, array in placed.state_dict().items():
        np.testing.assert_array_equal(array, twin.state_dict()[name], err_msg=name)

"""Snake, hand-worked: each rule of the docstring on a board small enough to draw."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fasttrain.games.snake import DOWN, LEFT, RIGHT, SPEC, UP, move_head, place_fruit, turn
from fasttrain.kernels import KernelEnv, seed_streams
from fasttrain.kernels.statecheck import state_problem
from tests.fasttrain.kernels.test_statecheck import state_refusal

OPPOSITE = {UP: DOWN, DOWN: UP, LEFT: RIGHT, RIGHT: LEFT}


@pytest.fixture(params=["python", "cpu"])
def backend(request):
    return request.param


def step(env, action):
    """Step env 0 with one action; return (reward, terminated, truncated) as Python values."""
    _, rewards, terminated, truncated = env.step(np.array([action]))
    return float(rewards[0]), bool(terminated[0]), bool(truncated[0])


# ------------------------------------------------------------------------------- sub-steps


def test_move_head_each_direction():
    assert move_head(3, 4, UP) == (2, 4)
    assert move_head(3, 4, RIGHT) == (3, 5)
    assert move_head(3, 4, DOWN) == (4, 4)
    assert move_head(3, 4, LEFT) == (3, 3)
    assert move_head(0, 0, UP) == (-1, 0)  # off the board is the caller's business
    assert move_head(0, 0, LEFT) == (0, -1)


def test_turn_keeps_straight_on_the_neck():
    for direction, action in itertools.product(range(4), range(4)):
        expected = direction if action == OPPOSITE[direction] else action
        assert turn(direction, action) == expected, (direction, action)


def _fruit_draws(occupied, num_cells, count, seed):
    side = math.isqrt(num_cells)  # a square board
    env = KernelEnv(SPEC, 1, "python", SPEC.make_params(height=side, width=side))
    _, s, p = env.objects()
    s.grid[0] = 0
    s.grid[0, occupied] = 1
    s.length[0] = len(occupied)
    s.fruit[0] = -7
    s.rng[:] = seed_streams(seed, 1)
    draws = []
    with np.errstate(over="ignore"):
        for _ in range(count):
            place_fruit(0, s, p)
            draws.append(int(s.fruit[0]))
    return np.array(draws)


@pytest.mark.parametrize("num_occupied", [3, 20])  # rejection sampling / scan of free cells
def test_place_fruit_uniform_over_free_cells(num_occupied):
    num_cells = 25
    occupied = list(np.random.default_rng(num_occupied).permutation(num_cells)[:num_occupied])
    free = sorted(set(range(num_cells)) - set(occupied))
    count = 400 * len(free)
    draws = _fruit_draws(occupied, num_cells, count, seed=num_occupied)
    assert set(draws) == set(free)
    counts = np.bincount(draws, minlength=num_cells)[free]
    # 400 expected per free cell; 5 standard deviations either way
    assert counts.min() > 400 - 5 * 20 and counts.max() < 400 + 5 * 20


def test_place_fruit_on_full_board_is_minus_one():
    assert list(_fruit_draws(list(range(9)), 9, 3, seed=0)) == [-1, -1, -1]


# ------------------------------------------------------------------------------- moves


@pytest.mark.parametrize(
    "action, head", [(UP, (1, 2)), (RIGHT, (2, 3)), (DOWN, (3, 2)), (LEFT, (2, 1))]
)
def test_each_action_moves_the_head(snake, backend, action, head):
    env = snake.make(backend)
    heading = (action + 1) % 4  # approach (2, 2) at right angles, so the action is a turn
    dr, dc = snake.DELTA[heading]
    body = [(2 - 2 * dr, 2 - 2 * dc), (2 - dr, 2 - dc), (2, 2)]
    snake.set(env, body, heading, fruit=(4, 4))
    assert step(env, action) == (0.0, False, False)
    assert snake.cells(env) == [*body[1:], head]
    assert int(env.state["direction"][0]) == action
    assert int(env.state["grid"][0].sum()) == 3
    assert env.state["grid"][0, body[0][0] * 5 + body[0][1]] == 0  # the tail moved on
    np.testing.assert_array_equal(
        env.obs[0].numpy(), snake.expected_obs(5, 5, [*body[1:], head], (4, 4))
    )


@pytest.mark.parametrize("heading", [UP, RIGHT, DOWN, LEFT])
def test_action_into_the_neck_keeps_going_straight(snake, backend, heading):
    env = snake.make(backend)
    dr, dc = snake.DELTA[heading]
    body = [(2 - 2 * dr, 2 - 2 * dc), (2 - dr, 2 - dc), (2, 2)]
    snake.set(env, body, heading, fruit=(0, 0))
    assert step(env, OPPOSITE[heading]) == (0.0, False, False)
    assert snake.cells(env)[-1] == (2 + dr, 2 + dc)
    assert int(env.state["direction"][0]) == heading


def test_ring_buffer_wraps(snake, backend):
    env = snake.make(backend, height=3, width=3)
    body = [(0, 0), (0, 1), (0, 2)]
    snake.set(env, body, RIGHT, fruit=(2, 0), tail=7)  # body slots 7, 8, 0
    step(env, DOWN)
    assert snake.cells(env) == [(0, 1), (0, 2), (1, 2)]
    assert int(env.state["tail"][0]) == 8
    step(env, LEFT)
    assert snake.cells(env) == [(0, 2), (1, 2), (1, 1)]
    assert int(env.state["tail"][0]) == 0
    np.testing.assert_array_equal(
        env.obs[0].numpy(), snake.expected_obs(3, 3, [(0, 2), (1, 2), (1, 1)], (2, 0))
    )


# ------------------------------------------------------------------------------- fruit


def test_eating_grows_scores_and_places_a_new_fruit(snake, backend):
    env = snake.make(backend, reward_fruit=2.5, reward_step=-0.25)
    body = [(2, 0), (2, 1), (2, 2)]
    snake.set(env, body, RIGHT, fruit=(2, 3))
    env.state["steps_since_food"][0] = 4
    assert step(env, RIGHT) == (2.5, False, False)
    cells = [*body, (2, 3)]
    assert snake.cells(env) == cells  # the tail stayed: length + 1
    assert int(env.state["length"][0]) == 4
    assert float(env.arrays["score"][0]) == 1.0
    assert int(env.state["steps_since_food"][0]) == 0
    fruit = snake.fruit(env)
    assert fruit is not None and fruit not in cells
    assert int(env.state["grid"][0].sum()) == 4
    np.testing.assert_array_equal(env.obs[0].numpy(), snake.expected_obs(5, 5, cells, fruit))
    # an ordinary step afterwards pays reward_step; death ends an episode with score 1
    env.state["fruit"][0] = 0  # (0, 0): out of the way
    assert step(env, DOWN) == (-0.25, False, False)  # (3, 3)
    assert step(env, DOWN) == (-0.25, False, False)  # (4, 3)
    assert step(env, DOWN) == (-1.0, True, False)  # (5, 3): off the board
    assert env.stats() == {"return": 2.5 - 0.5 - 1.0, "length": 4.0, "score": 1.0, "episodes": 1}


def test_head_may_enter_the_cell_the_tail_leaves(snake, backend):
    env = snake.make(backend, height=4, width=4)
    body = [(0, 0), (0, 1), (1, 1), (1, 0)]  # a closed 2x2 loop, heading left
    snake.set(env, body, LEFT, fruit=(3, 3))
    assert step(env, UP) == (0.0, False, False)
    assert snake.cells(env) == [(0, 1), (1, 1), (1, 0), (0, 0)]
    assert int(env.state["grid"][0].sum()) == 4
    assert env.state["grid"][0, 0] == 1  # the head's cell, freed and taken in the same step


# ------------------------------------------------------------------------------- endings


WALL_DEATHS = [
    ([(2, 0), (1, 0), (0, 0)], UP),  # to row -1
    ([(0, 2), (0, 3), (0, 4)], RIGHT),  # to col 5
    ([(2, 4), (3, 4), (4, 4)], DOWN),  # to row 5
    ([(4, 2), (4, 1), (4, 0)], LEFT),  # to col -1
]


@pytest.mark.parametrize("body, heading", WALL_DEATHS)
def test_wall_death(snake, backend, body, heading):
    env = snake.make(backend, reward_death=-2.5, max_episode_steps=1)
    snake.set(env, body, heading, fruit=(2, 2))
    # a time limit reached on the same step does not make a death a truncation
    assert step(env, heading) == (-2.5, True, False)
    np.testing.assert_array_equal(  # the snake never left the board
        env.final_obs[0].numpy(), snake.expected_obs(5, 5, body, (2, 2))
    )
    assert int(env.state["length"][0]) == 3 and int(env.state["steps"][0]) == 0  # reset


def test_wall_is_only_deadly_when_crossed(snake, backend):
    env = snake.make(backend)
    snake.set(env, [(2, 0), (1, 0), (0, 0)], UP, fruit=(4, 4))
    assert step(env, RIGHT) == (0.0, False, False)  # along the top row
    assert snake.cells(env)[-1] == (0, 1)


def test_body_death(snake, backend):
    env = snake.make(backend, reward_death=-2.5)
    body = [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1)]  # hook, heading left
    snake.set(env, body, LEFT, fruit=(4, 4))
    assert step(env, UP) == (-2.5, True, False)  # (0, 1) is body, not the leaving tail
    np.testing.assert_array_equal(env.final_obs[0].numpy(), snake.expected_obs(5, 5, body, (4, 4)))
    assert env.stats() == {"return": -2.5, "length": 1.0, "score": 0.0, "episodes": 1}


@pytest.mark.parametrize("tail", [0, 5])
def test_win_on_a_full_board(snake, backend, tail):
    env = snake.make(backend, height=3, width=3, reward_fruit=2.0)
    serpentine = [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0), (2, 0), (2, 1)]
    snake.set(env, serpentine, RIGHT, fruit=(2, 2), tail=tail)
    assert step(env, RIGHT) == (2.0, True, False)
    final = env.final_obs[0].numpy()
    np.testing.assert_array_equal(final[0], np.ones((3, 3)))
    np.testing.assert_array_equal(final[1], [[0, 0, 0], [0, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(final[2], np.zeros((3, 3)))  # no free cell, no fruit
    np.testing.assert_array_equal(final[3], [[1, 2, 3], [6, 5, 4], [7, 8, 9]])
    assert env.stats() == {"return": 2.0, "length": 1.0, "score": 1.0, "episodes": 1}
    assert int(env.state["length"][0]) == 3  # a fresh episode
    assert int(env.obs[0, 0].sum()) == 3 and int(env.obs[0, 2].sum()) == 1


# a length-3 snake circling a 2x2 square never dies: each move enters the one free cell
LOOP = [LEFT, UP, RIGHT, DOWN]


@pytest.mark.parametrize("limit, expected_step", [(5, 5), (0, 4 * 3 * 3)])
def test_truncation_without_food(snake, backend, limit, expected_step):
    env = snake.make(backend, height=3, width=3, max_steps_without_food=limit, reward_step=-0.5)
    body = [(0, 0), (0, 1), (1, 1)]
    snake.set(env, body, DOWN, fruit=(2, 2))
    for t in range(1, expected_step + 1):
        before = snake.cells(env)
        result = step(env, LOOP[(t - 1) % 4])
        if t < expected_step:
            assert result == (-0.5, False, False), t
        else:
            assert result == (-0.5, False, True)
    dr, dc = snake.DELTA[LOOP[(expected_step - 1) % 4]]
    last = [*before[1:], (before[-1][0] + dr, before[-1][1] + dc)]
    np.testing.assert_array_equal(env.final_obs[0].numpy(), snake.expected_obs(3, 3, last, (2, 2)))
    assert env.stats()["length"] == expected_step
    assert int(env.state["steps"][0]) == 0 and int(env.state["steps_since_food"][0]) == 0


def test_truncation_at_max_episode_steps_counts_steps_since_reset(snake, backend):
    env = snake.make(backend, height=3, width=3, max_episode_steps=3, max_steps_without_food=100)
    snake.set(env, [(0, 0), (0, 1), (1, 1)], DOWN, fruit=(1, 0))
    assert step(env, LEFT)[:2] == (1.0, False)  # eats: steps since food restart, episode steps not
    assert step(env, UP) == (0.0, False, False)  # into the tail's cell (0, 0)
    cells = snake.cells(env)
    fruit = snake.fruit(env)
    assert step(env, RIGHT) == (0.0, False, True)  # into the tail's cell (0, 1)
    final = [*cells[1:], (0, 1)]
    np.testing.assert_array_equal(env.final_obs[0].numpy(), snake.expected_obs(3, 3, final, fruit))
    assert env.stats() == {"return": 1.0, "length": 3.0, "score": 1.0, "episodes": 1}


# ------------------------------------------------------------------------------- observation


def test_body_order_is_capped_at_255(snake, backend):
    env = snake.make(backend, height=17, width=17)
    serpentine = [(r, c if r % 2 == 0 else 16 - c) for r in range(17) for c in range(17)][:260]
    assert serpentine[-1] == (15, 12)
    snake.set(env, serpentine, LEFT, fruit=(16, 0))
    assert step(env, LEFT) == (0.0, False, False)
    cells = [*serpentine[1:], (15, 11)]
    obs = env.obs[0].numpy()
    np.testing.assert_array_equal(obs, snake.expected_obs(17, 17, cells, (16, 0)))
    assert obs[3, 0, 1] == 1 and obs[3].max() == 255 and int((obs[3] == 255).sum()) == 6


def _safe_actions(env, snake, gen):
    """A random action per env that does not kill the snake now (any action if none is safe)."""
    h, w = env.params.height, env.params.width
    actions = gen.integers(0, 4, env.num_envs)
    for i in range(env.num_envs):
        cells = snake.cells(env, i)
        head, tail = cells[-1], cells[0]
        options = []
        for a in range(4):
            r, c = move_head(*head, turn(int(env.state["direction"][i]), a))
            inside = 0 <= r < h and 0 <= c < w
            eats = (r, c) == snake.fruit(env, i)
            if inside and ((r, c) not in cells or ((r, c) == tail and not eats)):
                options.append(a)
        if options:
            actions[i] = options[gen.integers(len(options))]
    return actions


def test_observation_and_state_stay_consistent(snake):
    """Long episodes (safe random play) wrap the ring buffer and grow the snake."""
    env = snake.make("cpu", num_envs=24, seed=8, height=6, width=6)
    gen = np.random.default_rng(9)
    longest = 0
    for _ in range(250):
        env.step(_safe_actions(env, snake, gen))
        for i in range(env.num_envs):
            cells, fruit = snake.cells(env, i), snake.fruit(env, i)
            longest = max(longest, len(cells))
            assert len(set(cells)) == len(cells)
            for (r0, c0), (r1, c1) in zip(cells, cells[1:], strict=False):
                assert abs(r0 - r1) + abs(c0 - c1) == 1
            grid = np.zeros(36, dtype=np.uint8)
            grid[[r * 6 + c for r, c in cells]] = 1
            np.testing.assert_array_equal(env.state["grid"][i], grid)
            assert fruit is not None and fruit not in cells
            np.testing.assert_array_equal(
                env.obs[i].numpy(), snake.expected_obs(6, 6, cells, fruit)
            )
    assert longest >= 10


def test_start_positions(snake):
    env = snake.make("cpu", num_envs=4096, seed=0)
    seen = set()
    for seed in (0, 1):
        env.reset(seed=seed)
        st = env.state
        assert np.all(st["length"] == 3) and np.all(st["steps"] == 0)
        assert np.all(st["steps_since_food"] == 0)
        assert np.all(st["grid"].sum(axis=1) == 3)
        for i in range(env.num_envs):
            cells, fruit = snake.cells(env, i), snake.fruit(env, i)
            direction = int(st["direction"][i])
            dr, dc = snake.DELTA[direction]
            assert cells[1] == (cells[0][0] + dr, cells[0][1] + dc)  # straight, heading away
            assert cells[2] == (cells[1][0] + dr, cells[1][1] + dc)
            assert all(0 <= r < 5 and 0 <= c < 5 for r, c in cells)
            assert fruit is not None and fruit not in cells
            seen.add((cells[-1], direction))
            if i < 64:
                np.testing.assert_array_equal(
                    env.obs[i].numpy(), snake.expected_obs(5, 5, cells, fruit)
                )
    # every placement that fits occurs: 4 headings x 3 x 5 head cells on a 5x5 board
    fits = set()
    for d, r, c in itertools.product(range(4), range(5), range(5)):
        dr, dc = snake.DELTA[d]
        if 0 <= r - 2 * dr < 5 and 0 <= c - 2 * dc < 5:
            fits.add(((r, c), d))
    assert len(fits) == 60 and seen == fits


def test_render_text(snake):
    env = snake.make("cpu", height=4, width=5)
    snake.set(env, [(1, 0), (1, 1), (1, 2)], RIGHT, fruit=(3, 3))
    expected = "\n".join(["+-----+", "|.....|", "|oo@..|", "|.....|", "|...*.|", "+-----+"])
    assert env.render(0) == expected


# ------------------------------------------------------------------------------- state from a file


def _safe_random(env, gen) -> np.ndarray:
    """Per env a random action among those that do not die now (any one if none is safe), so
    that small boards are won."""
    st, h, w = env.state, env.params.height, env.params.width
    cells = h * w
    n = len(st["length"])
    head = st["body"][np.arange(n), (st["tail"] + st["length"] - 1) % cells].astype(np.int64)
    tail = st["body"][np.arange(n), st["tail"]].astype(np.int64)
    safe = np.zeros((n, 4), dtype=bool)
    for a in range(4):
        d = np.where(a == st["direction"] ^ 2, st["direction"], a)  # into the neck: straight
        r = head // w + np.select([d == UP, d == DOWN], [-1, 1], 0)
        c = head % w + np.select([d == LEFT, d == RIGHT], [-1, 1], 0)
        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        new = np.where(inside, r * w + c, 0)
        free = st["grid"][np.arange(n), new] == 0
        safe[:, a] = inside & (free | ((new == tail) & (new != st["fruit"])))
    keys = gen.random((n, 4)) + safe  # the safe actions rank first, in random order
    return keys.argmax(axis=1)


def _played(height, width, seed, num_envs=32, num_steps=600):
    """States safe random play produces (every 5th step), and the wins and ended episodes."""
    env = KernelEnv(SPEC, num_envs, "cpu", SPEC.make_params(height=height, width=width), seed=seed)
    env.reset()
    gen = np.random.default_rng(seed)
    states, wins, ended = [], 0, 0
    for t in range(num_steps):
        env.arrays["actions"][...] = _safe_random(env, gen)
        env.step()
        wins += int((env.arrays["terminated"] & (env.arrays["rewards"] > 0)).sum())
        ended += int((env.arrays["terminated"] | env.arrays["truncated"]).sum())
        if t % 5 == 0:
            states.append(env.state_dict())
    return env, states, wins, ended


def test_every_state_random_play_reaches_loads():
    """Guards the bounds against being tighter than the game: wins, deaths, time-outs."""
    wins = 0
    for seed, (height, width) in enumerate([(3, 3), (4, 5)]):
        env, states, won, ended = _played(height, width, seed)
        wins += won
        assert ended > 50
        for state in states:
            assert state_problem(SPEC, env.params, state, 4) is None
    assert wins > 0


def test_a_full_board_loads(snake):
    """The state of a win (length = every cell, no fruit) is one the game makes."""
    env = snake.make("python", height=3, width=3)
    serpentine = [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    snake.set(env, serpentine, RIGHT, fruit=None, tail=4)
    env.load_state_dict(env.state_dict())
    assert snake.cells(env) == serpentine


@pytest.fixture
def played(snake):
    """Three envs on a 6x6 board, env 1 a hand-placed snake whose ring wraps."""
    env = snake.make("cpu", num_envs=3, seed=2, height=6, width=6)
    snake.set(env, [(3, 1), (3, 2), (2, 2), (2, 3)], RIGHT, fruit=(5, 5), i=1, tail=34)
    return env


def _refused(env, change) -> str:
    """The one-line refusal of ``env``'s state with ``change`` applied (nothing written)."""
    message = state_refusal(env, change)
    assert message.startswith("game 'snake' state, env 1: ")
    return message


def _put(name, value, index=()):
    def change(state):
        state[name][(1, *index)] = value

    return change


@pytest.mark.parametrize(
    ("name", "index", "value", "valid"),
    [
        ("body", (7,), -1, "0 to 35"),  # a slot outside the ring: every slot is a cell
        ("body", (0,), 36, "0 to 35"),
        ("tail", (), -1, "0 to 35"),
        ("tail", (), 36, "0 to 35"),
        ("length", (), 2, "3 to 36"),
        ("length", (), 37, "3 to 36"),
        ("length", (), 2_000_000_000, "3 to 36"),
        ("direction", (), -1, "0 to 3"),
        ("direction", (), 4, "0 to 3"),
        ("fruit", (), -2, "-1 to 35"),
        ("fruit", (), 36, "-1 to 35"),
        ("fruit", (), 100_000_000, "-1 to 35"),
        ("grid", (4,), 2, "0 to 1"),
        ("steps_since_food", (), -1, "0 to 1073741824"),
        ("steps", (), -1, "0 to 1073741824"),
    ],
)
def test_a_field_outside_its_range_is_refused(played, name, index, value, valid):
    message = _refused(played, _put(name, value, index))
    assert message.endswith(f"{name} = {value}; valid: {valid}")


def _grid_full(state):
    state["grid"][1] = 1  # place_fruit's rejection loop would never find a free cell


def _body_jumps(state):
    state["body"][1, [34, 35]] = state["body"][1, [35, 34]]  # same cells, not in a line


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_grid_full, "grid[0] = 1, but the body (4 cells from ring slot 34) covers cell 0 0 time"),
        (_put("grid", 0, (20,)), "grid[20] = 0, but the body (4 cells from ring slot 34) covers"),
        (
            _put("length", 5),
            "grid[0] = 0, but the body (5 cells from ring slot 34) covers cell 0 1",
        ),
        (_put("body", 13, (0,)), "grid[13] = 0, but the body (4 cells from ring slot 34) covers"),
        (_body_jumps, "body cells 19 and 14 are not neighbours"),
        (_put("direction", UP), "direction = 0 but the head last moved 1"),
        (_put("fruit", 14), "fruit = 14 with length = 4 of 36 cells; valid: a free cell"),
        (_put("fruit", -1), "fruit = -1 with length = 4 of 36 cells"),
    ],
)
def test_a_state_against_the_game_s_invariants_is_refused(played, change, says):
    assert says in _refused(played, change)


def test_a_refused_state_never_reaches_the_step(played):
    """After the refusal the env steps on from its own state, as if nothing had been offered."""
    twin = KernelEnv(SPEC, 3, "cpu", played.params, seed=2)
    twin.load_state_dict(played.state_dict())
    _refused(played, _put("fruit", 100_000_000))
    for env in (played, twin):
        env.arrays["actions"][...] = UP
        env.step()
    for name, array in played.state_dict().items():
        np.testing.assert_array_equal(array, twin.state_dict()[name], err_msg=name)

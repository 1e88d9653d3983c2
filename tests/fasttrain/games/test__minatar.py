"""fasttrain.games._minatar, the base the MinAtar games share: colour pictures in MinAtar's
palette with its highest-channel-wins rule; every game's state bounds (each field's range, real
play inside them, a value just outside refused in one line)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fasttrain
from fasttrain import games
from fasttrain.games._minatar import palette, render_rgb
from fasttrain.kernels.statecheck import state_problem
from tests.fasttrain.kernels.test_statecheck import state_refusal

MINATAR = [name for name in games.names() if name.startswith("minatar-")]


@pytest.mark.parametrize("channels", [3, 4, 6, 7, 10])
def test_palette_is_seaborns_cubehelix_from_matplotlibs_map(channels):
    """seaborn's ``color_palette("cubehelix", n)`` samples matplotlib's map strictly inside
    [0, 1] (seaborn itself is not installed: its sampling rule is reproduced here)."""
    matplotlib = pytest.importorskip("matplotlib")
    points = np.linspace(0, 1, channels + 2)[1:-1]
    expected = np.round(matplotlib.colormaps["cubehelix"](points)[:, :3] * 255)
    table = palette(channels)
    assert table.dtype == np.uint8 and table.shape == (channels + 1, 3)
    assert np.array_equal(table[0], [0, 0, 0])
    assert np.array_equal(table[1:], expected.astype(np.uint8))


def test_highest_channel_wins_and_empty_cells_are_black():
    obs = np.zeros((4, 10, 10), dtype=np.uint8)
    obs[0, 9, 4] = 1  # one channel
    obs[1, 3, 3] = obs[3, 3, 3] = 1  # two channels in one cell: the higher (3) shows
    obs[2, 0, 0] = 1
    picture = render_rgb({}, obs, None)
    table = palette(4)
    assert picture.shape == (10, 10, 3) and picture.dtype == np.uint8
    assert np.array_equal(picture[9, 4], table[1])
    assert np.array_equal(picture[3, 3], table[4])
    assert np.array_equal(picture[0, 0], table[3])
    lit = np.zeros((10, 10), dtype=bool)
    lit[9, 4] = lit[3, 3] = lit[0, 0] = True
    assert not picture[~lit].any()


@pytest.mark.parametrize("game", MINATAR)
def test_every_minatar_game_renders_its_observation(game):
    env = fasttrain.make(game, num_envs=3, backend="cpu", seed=4)
    gen = np.random.default_rng(0)
    for _ in range(20):
        env.step(gen.integers(0, env.num_actions, 3))
    for i in range(3):
        obs = env.obs[i].numpy()
        picture = env.render_rgb(i)
        assert picture.shape == (10, 10, 3) and picture.dtype == np.uint8
        assert np.array_equal(picture, render_rgb({}, obs, env.params))
        assert np.array_equal(picture.any(axis=2), obs.any(axis=0))


def test_a_game_without_colour_rendering_says_so():
    from fasttrain.games import snake
    from fasttrain.kernels import KernelEnv

    spec = dataclasses.replace(snake.SPEC, name="snake-no-rgb", render_rgb=None)
    env = KernelEnv(spec, 1, "python", spec.make_params())
    with pytest.raises(ValueError, match="no colour rendering"):
        env.render_rgb(0)


# ------------------------------------------------------------------------------- state from a file


def _played(game, seed, steps, envs=8, **params):
    """An env of ``game`` after ``steps`` random-action steps, and every state it passed
    through (sampled): ``(env, [state_dict, ...])``."""
    env = fasttrain.make(game, num_envs=envs, backend="cpu", seed=seed, **params)
    gen = np.random.default_rng(seed)
    states = []
    for step in range(steps):
        env.step(gen.integers(0, env.num_actions, envs))
        if step % 23 == 0:
            states.append(env.state_dict())
    return env, states


@pytest.mark.parametrize("game", MINATAR)
def test_every_state_that_random_play_reaches_passes_the_check(game):
    """Guards against bounds tighter than the game: many episodes, ended and reset (a Freeway
    episode lasts 2501 steps), two seeds, the full and the minimal action set."""
    episodes = 0
    for seed, minimal in ((0, False), (1, True)):
        env, states = _played(game, seed, 2700, minimal_action_set=minimal)
        for state in states:
            assert state_problem(env.spec, env.params, state, env.num_actions) is None
        env.load_state_dict(states[-1])  # and loads
        episodes += env.stats()["episodes"]
    assert episodes >= 16


# what each index field must stay inside for every array access of its game to be in bounds
INDEX_FIELDS = {
    "minatar-breakout": {
        **dict.fromkeys(("ball_x", "last_x", "pos"), (0, 9)),
        **dict.fromkeys(("ball_y", "last_y"), (0, 8)),  # the ball's next row is <= 9
        "ball_dir": (0, 3),  # indexes the direction tables
    },
    "minatar-freeway": {"pos": (0, 9), "car_x": (0, 9), "car_speed": (-5, 5)},  # |speed|: channel
    "minatar-asterix": {"player_x": (0, 9), "player_y": (0, 9), "entities": (-1, 10)},
    "minatar-seaquest": {
        "sub_x": (0, 9),
        "sub_y": (0, 9),
        "oxygen": (0, 219),  # oxygen * 10 // 200 gauge cells
        "diver_count": (-(2**31) + 10, 9),  # SIZE - 1 - diver_count: no int32 overflow
        "n_bullets": (0, 4),
        "n_e_bullets": (0, 40),
        "n_fish": (0, 32),
        "n_subs": (0, 32),
        "n_divers": (0, 4),
    },
    "minatar-space_invaders": {"pos": (0, 9)},
}


@pytest.mark.parametrize("game", MINATAR)
def test_every_field_is_bounded_and_index_fields_stay_in_bounds(game):
    spec = games.get(game)
    params = spec.make_params()
    for field in spec.state:
        low, high = field.bounds(params)
        assert low is not None, field.name
        assert high is not None or field.name == "steps", field.name  # steps only counts
    for name, (safe_low, safe_high) in INDEX_FIELDS[game].items():
        low, high = next(f for f in spec.state if f.name == name).bounds(params)
        assert safe_low <= low <= high <= safe_high, name


def _outside(spec, params):
    """``(field, value)`` for each declared bound: the value just outside it (where the dtype
    holds it)."""
    cases = []
    for field in spec.state:
        info = np.iinfo(field.dtype)
        low, high = field.bounds(params)
        if low is not None and low - 1 >= info.min:
            cases.append((field.name, low - 1))
        if high is not None and high + 1 <= info.max:
            cases.append((field.name, high + 1))
    return cases


CASES = [
    (game, name, value)
    for game in MINATAR
    for name, value in _outside(games.get(game), games.get(game).make_params())
]


@pytest.fixture(scope="module")
def played():
    """Each game's env after a little random play (shared: the cases only read it)."""
    return {game: _played(game, 2, 60, envs=3)[0] for game in MINATAR}


@pytest.mark.parametrize(("game", "name", "value"), CASES)
def test_a_value_just_outside_a_fields_range_is_refused_in_one_line(played, game, name, value):
    env = played[game]

    def change(state):
        state[name].reshape(env.num_envs, -1)[1, 0] = value  # env 1's first value

    message = state_refusal(env, change)
    low, high = next(f for f in env.spec.state if f.name == name).bounds(env.params)
    if high is None:  # an int32 counter is held within 2**30 of 0 (statecheck)
        high = 2**30 if env.arrays[name].dtype == np.int32 else "any"
    assert message == f"game {game!r} state, env 1: {name} = {value}; valid: {low} to {high}"


def _set(**values):
    """A change to env 1's state: ``name=value`` (a scalar, or a row's values by index)."""

    def change(state):
        for name, value in values.items():
            if isinstance(value, dict):
                for index, row in value.items():
                    state[name][(1, *np.atleast_1d(index))] = row
            else:
                state[name][1] = value

    return change


# (game, change to env 1, the line it gets; None: a state the game does produce, accepted)
INVARIANTS = [
    ("minatar-breakout", _set(bricks={95: 1}), "bricks[95] = 1; valid: 0 outside rows 1-3"),
    ("minatar-breakout", _set(bricks={5: 1}), "bricks[5] = 1; valid: 0 outside rows 1-3"),
    ("minatar-freeway", _set(car_speed={3: 0}), "car_speed[3] = 0; valid: -5 to -1 or 1 to 5"),
    ("minatar-freeway", _set(car_speed={3: -5}), None),
    (
        "minatar-asterix",
        _set(entities={2: (0, 4, 1, 2)}),
        "entities[2, 3] = 2; valid: 0 or 1 in columns 0 (active), 2 (moving right) and 3",
    ),
    (
        "minatar-asterix",
        _set(entities={4: (1, 10, 1, 0)}),
        "entities[4, 1] = 10; valid: 0 to 9 in column 1 of an active lane",
    ),
    ("minatar-asterix", _set(entities={4: (0, 10, 1, 0)}), None),  # left the screen, off
    (
        "minatar-seaquest",
        _set(n_fish=1, fish={0: (10, 3, 1, 0)}),
        "fish[0, 0] = 10; valid: 0 to 9 (x of the first n_fish rows)",
    ),
    (
        "minatar-seaquest",
        _set(n_e_bullets=1, e_bullets={0: (4, 0, 1)}),
        "e_bullets[0, 1] = 0; valid: 1 to 8 (y of the first n_e_bullets rows)",
    ),
    (
        "minatar-seaquest",
        _set(n_subs=1, subs={0: (4, 2, 1, 6, 3)}),
        "subs[0, 3] = 6; valid: 0 to 5 (move timer of the first n_subs rows)",
    ),
    (
        "minatar-seaquest",
        _set(n_divers=2, divers={0: (3, 4, 0, 5), 1: (8, 1, 1, 2), 2: (-1, 0, 1, 5)}),
        None,  # rows past the count keep what the game left in them
    ),
    ("minatar-seaquest", _set(n_e_bullets=0, e_bullets={0: (11, 8, 1)}), None),
    ("minatar-space_invaders", _set(alien_dir=0), "alien_dir = 0; valid: -1 or 1"),
    ("minatar-space_invaders", _set(aliens=0), "number of aliens = 0; valid: 1 to 100"),
]


@pytest.mark.parametrize(("game", "change", "says"), INVARIANTS)
def test_each_games_invariants_refuse_what_it_cannot_produce(played, game, change, says):
    env = played[game]
    state = {name: array.copy() for name, array in env.state_dict().items()}
    assert state_problem(env.spec, env.params, state, env.num_actions) is None
    change(state)
    problem = state_problem(env.spec, env.params, state, env.num_actions)
    if says is None:
        assert problem is None
    else:
        assert problem.startswith(f"env 1: {says}") and "\n" not in problem, problem


def test_a_brick_on_the_bottom_row_would_let_the_ball_rest_there():
    """Why Breakout's check exists: struck with ``strike`` set, a brick on row 9 keeps the ball
    on row 9 (a row the game never keeps it on), from which its next move would read row 10 of
    ``bricks``, past the array's end."""
    from fasttrain.games import minatar_breakout as breakout
    from fasttrain.kernels import KernelEnv

    env = KernelEnv(breakout.SPEC, 1, "python", breakout.SPEC.make_params(sticky_action_prob=0))
    env.reset(seed=0)
    s = env.state
    s["ball_x"][0], s["ball_y"][0], s["ball_dir"][0], s["strike"][0] = 4, 8, 2, 1
    s["bricks"][0, 95] = 1
    assert "bricks[95] = 1" in state_problem(env.spec, env.params, env.state_dict(), 6)
    env.arrays["actions"][0] = breakout.NOOP
    env.step()  # the plain-Python reference: nothing outside an array is touched yet
    assert int(s["ball_y"][0]) == 9
    assert "ball_y = 9; valid: 0 to 8" in state_problem(env.spec, env.params, env.state_dict(), 6)

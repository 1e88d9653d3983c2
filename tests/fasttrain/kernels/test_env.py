"""Params: ``KernelEnv.set_params`` between steps, str params with ``GameSpec.choices``,
games with more params and state arrays than a call could once pass (no limit now), and the
env-minor memory layout the cuda backend uses (here on the host backends, against env-major).

A tiny game defined here: each step rewards ``scale * value + offset``, where ``value`` is the
action, twice it or minus it (``mode``); ``reset_one`` writes ``start`` into the observation;
``size`` sets the shape of a state array (a shape param), ``length`` ends episodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from fasttrain import games
from fasttrain.kernels import Field, GameSpec, KernelEnv, assert_backends_agree

BACKENDS = ["python", "cpu"]
MODES = ("plain", "doubled", "negated")


@dataclass(frozen=True)
class DialParams:
    size: int = 2
    """slots of ``history`` (sets a buffer shape)"""
    scale: float = 1.0
    """reward per unit of value"""
    offset: int = 0
    """added to every reward"""
    mode: str = "plain"
    """plain | doubled | negated: the value of an action"""
    start: int = 0
    """the observation after a reset"""
    length: int = 100
    """steps per episode"""


def reset_one(i, io, s, p):
    s.count[i] = 0
    for k in range(p.size):
        s.history[i, k] = 0.0
    io.obs[i, 0] = p.start


def step_one(i, io, s, p):
    s.count[i] += 1
    action = io.actions[i]
    value = action if p.mode == 0 else 2 * action if p.mode == 1 else -action
    io.rewards[i] = p.scale * value + p.offset
    s.history[i, s.count[i] % s.history.shape[1]] = io.rewards[i]
    io.obs[i, 0] = s.count[i]
    io.terminated[i] = s.count[i] >= p.length
    io.truncated[i] = False


DIAL = GameSpec(
    name="dial",
    params_cls=DialParams,
    state=(
        Field("count", lambda p: (), np.int64, "() steps this episode"),
        Field("history", lambda p: (p.size,), np.float64, "(size,) recent rewards"),
    ),
    obs_shape=lambda p: (1,),
    obs_dtype=np.float32,
    num_actions=3,
    reset_one=reset_one,
    step_one=step_one,
    render_text=lambda state, params: str(state["count"]),
    choices={"mode": MODES},
)


def make_env(backend, num_envs=3, layout=None, **params):
    env = KernelEnv(DIAL, num_envs, backend, DIAL.make_params(**params), seed=0, layout=layout)
    env.reset(seed=0)
    return env


def play(env, actions, args=None) -> list[float]:
    env.arrays["actions"][:] = np.array(actions, dtype=np.int64)
    assert env.step(args) == -1
    return env.arrays["rewards"].tolist()


def snapshot(env) -> dict:
    return {name: array.copy() for name, array in env.arrays.items()}


def assert_same(env, before):
    for name, array in before.items():
        np.testing.assert_array_equal(env.arrays[name], array, err_msg=name)


# ------------------------------------------------------------------------------- set_params


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_params_take_effect_at_the_next_step(backend):
    env = make_env(backend)
    assert play(env, [0, 1, 2]) == [0.0, 1.0, 2.0]
    before = snapshot(env)
    env.set_params(DIAL.make_params(scale=0.5, offset=3, mode="doubled"))
    assert_same(env, before)  # nothing happens between steps
    assert play(env, [0, 1, 2]) == [3.0, 4.0, 5.0]  # 0.5 * 2a + 3
    env.set_params(DIAL.make_params(scale=2.0, mode="negated"))
    assert play(env, [0, 1, 2]) == [0.0, -2.0, -4.0]
    assert env.params == DIAL.make_params(scale=2.0, mode="negated")
    assert env.arrays["count"].tolist() == [3, 3, 3]  # the episodes played on


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_and_episode_ends_use_the_new_params(backend):
    env = make_env(backend, num_envs=2)
    env.set_params(DIAL.make_params(start=7, length=2))
    env.reset()
    assert env.arrays["obs"][:, 0].tolist() == [7.0, 7.0]
    play(env, [1, 1])
    assert env.arrays["terminated"].tolist() == [False, False]
    play(env, [1, 1])  # the second step ends the episode: the auto-reset writes start
    assert env.arrays["terminated"].tolist() == [True, True]
    assert env.arrays["obs"][:, 0].tolist() == [7.0, 7.0]
    assert env.arrays["final_obs"][:, 0].tolist() == [2.0, 2.0]


def test_no_recompilation_and_no_reallocation():
    env = make_env("cpu")
    play(env, [1, 1, 1])
    compiled = env.launchers.num_compiled()
    assert compiled >= 2
    arrays = {name: array for name, array in env.arrays.items()}
    addresses = {name: array.__array_interface__["data"][0] for name, array in arrays.items()}
    for k, mode in enumerate(MODES * 2):
        env.set_params(DIAL.make_params(scale=1.5 + k, offset=k, mode=mode, length=50 + k))
        play(env, [2, 0, 1])
        env.reset()
    assert env.launchers.num_compiled() == compiled
    for name, array in env.arrays.items():
        assert array is arrays[name], name
        assert array.__array_interface__["data"][0] == addresses[name], name
    assert env.params_version == 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shape_param_is_refused_in_one_line_and_nothing_changes(backend):
    env = make_env(backend)
    play(env, [1, 2, 0])
    before, params, version = snapshot(env), env.params, env.params_version
    # with a param that may change beside it: that one is not applied either
    with pytest.raises(ValueError) as excinfo:
        env.set_params(DIAL.make_params(size=3, scale=10.0))
    message = str(excinfo.value)
    assert "\n" not in message
    assert message == (
        "game 'dial' parameter 'size' sets buffer shapes and cannot change after the "
        "environments are made"
    )
    assert env.params is params and env.params_version == version
    assert_same(env, before)
    assert play(env, [1, 2, 0]) == [1.0, 2.0, 0.0]  # the old scale
    assert env.arrays["history"].shape == (3, 2)


def test_set_params_wants_the_games_params_class():
    env = make_env("cpu")
    with pytest.raises(TypeError, match="params must be a DialParams"):
        env.set_params({"scale": 2.0})
    with pytest.raises(TypeError, match="params must be a DialParams"):
        env.set_params(dataclasses.make_dataclass("DialParams", [("scale", float, 2.0)])())


@pytest.mark.parametrize("layout", ["env-major", "obs-minor"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_launcher_arguments_built_before_are_refreshed_by_refresh_args(backend, layout):
    """``step_args`` built before set_params keep the old values, as documented, until passed
    through ``refresh_args``; they still write into their own buffers (env-minor: through the
    copy that completes each step, which ``refresh_args`` keeps)."""
    env = make_env(backend, num_envs=2, layout=layout)
    obs, final_obs = np.zeros((2, 1), np.float32), np.zeros((2, 1), np.float32)
    args = env.step_args(obs, final_obs)
    env.set_params(DIAL.make_params(offset=10))
    assert play(env, [1, 2], args) == [1.0, 2.0]  # old values
    fresh = env.refresh_args(args)
    assert play(env, [1, 2], fresh) == [11.0, 12.0]
    assert obs[:, 0].tolist() == [2.0, 2.0]  # the bound buffers were written
    assert play(env, [1, 2]) == [11.0, 12.0]  # the env's own arguments are fresh already
    assert obs[:, 0].tolist() == [2.0, 2.0] and env.arrays["obs"][:, 0].tolist() == [3.0, 3.0]


# ------------------------------------------------------------------------------- choices


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_choice_plays_by_its_own_rule(backend):
    rewards = {}
    for mode in MODES:
        env = make_env(backend, num_envs=3, mode=mode)
        rewards[mode] = play(env, [0, 1, 2])
    assert rewards == {
        "plain": [0.0, 1.0, 2.0],
        "doubled": [0.0, 2.0, 4.0],
        "negated": [0.0, -1.0, -2.0],
    }


# ------------------------------------------------------------------------------- wide games

# Python compiles a call of more than 30 arguments as f(*args); games once passed one argument
# per array and param, and were held to 30 of them. The objects have no such limit.
WIDE = 40


def _function(name: str, body: str):
    """A real game function of ``(i, io, s, p)`` with this body."""
    namespace: dict = {}
    exec(f"def {name}(i, io, s, p):\n{body}", namespace)
    return namespace[name]


def wide_game(count: int, where: str = "step_one") -> GameSpec:
    """A game of ``count`` int params ``p0, p1, ...`` (p_k = k) and ``count`` state arrays
    ``s0, s1, ...``, each of whose ``where`` function writes every param into its state array
    and sums the params into the reward (or the reset observation)."""
    names = [f"p{k}" for k in range(count)]
    params_cls = dataclasses.make_dataclass(
        f"Wide{count}", [(n, int, k) for k, n in enumerate(names)], frozen=True
    )
    state = tuple(Field(f"s{k}", lambda p: (), np.int64, "() p_k, copied") for k in range(count))
    total = " + ".join(f"p.{n}" for n in names)
    copies = "".join(f"    s.s{k}[i] = p.{n}\n" for k, n in enumerate(names))
    step_body = "    io.terminated[i] = False\n    io.truncated[i] = False\n"
    if where == "step_one":
        step = _function(
            "step_one", f"    io.rewards[i] = io.actions[i] + {total}\n" + copies + step_body
        )
        reset = _function("reset_one", "    io.obs[i, 0] = 0.0\n")
    else:
        step = _function("step_one", "    io.rewards[i] = io.actions[i]\n" + step_body)
        reset = _function("reset_one", f"    io.obs[i, 0] = {total}\n" + copies)
    return GameSpec(
        name=f"wide_{count}_{where}",
        params_cls=params_cls,
        state=state,
        obs_shape=lambda p: (1,),
        obs_dtype=np.float32,
        num_actions=2,
        reset_one=reset,
        step_one=step,
        render_text=lambda state, params: "",
    )


@pytest.mark.parametrize("where", ["step_one", "reset_one"])
def test_a_game_of_more_params_and_state_arrays_than_a_call_once_took_compiles_and_agrees(where):
    spec = wide_game(WIDE, where)
    params = spec.make_params()
    assert assert_backends_agree(spec, BACKENDS, 2, 3, params=params) == 0
    env = KernelEnv(spec, 2, "cpu", params)
    env.reset(seed=0)
    total = float(sum(range(WIDE)))  # p_k = k
    if where == "step_one":
        assert play(env, [1, 0]) == [1.0 + total, total]
    else:
        assert env.arrays["obs"][:, 0].tolist() == [total, total]
    assert [int(env.state[f"s{k}"][1]) for k in range(WIDE)] == list(range(WIDE))


# an agent game whose number of agents is a param that sets no state shape: only the agent rows


@dataclass(frozen=True)
class CrowdParams:
    num_players: int = 2
    """agents per environment"""
    bonus: float = 0.0
    """added to every reward"""


def crowd_reset(i, io, s, p):
    s.turns[i] = 0


def crowd_step(i, io, s, p):
    s.turns[i] += 1
    for a in range(io.actions.shape[1]):
        io.rewards[i, a] = io.actions[i, a] + p.bonus
        io.terminated[i, a] = False
        io.truncated[i, a] = False


def crowd_observe(i, a, io, s, p):
    io.obs_flat[i, a, 0] = s.turns[i]


CROWD = GameSpec(
    name="crowd",
    params_cls=CrowdParams,
    state=(Field("turns", lambda p: (), np.int64, "() steps taken"),),
    obs_shape=lambda p: (1,),
    obs_dtype=np.float32,
    num_actions=2,
    reset_one=crowd_reset,
    step_one=crowd_step,
    render_text=lambda state, params: "",
    num_agents=lambda p: p.num_players,
    observe=crowd_observe,
)


def test_the_number_of_agents_is_a_shape_param_even_with_no_state_shape_of_its_own():
    env = KernelEnv(CROWD, 2, "python", CROWD.make_params(), seed=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="parameter 'num_players' sets buffer shapes"):
        env.set_params(CROWD.make_params(num_players=3))
    env.set_params(CROWD.make_params(bonus=0.5))
    assert play(env, [1, 0, 0, 1]) == [1.5, 0.5, 0.5, 1.5]


# ------------------------------------------------------------------------------- populations

# tiny games whose episodes end within the steps played; the arena has a bot (its moves draw
# from the env's rng) and two agents per env, so a block of envs is a block of rows
POPULATION_GAMES = {
    "snake": {"height": 5, "width": 5},
    "minatar-breakout": {"max_episode_steps": 40},
    "arena": {"width": 10, "height": 10, "vision": 2, "num_snakes": 2, "num_food": 2}
    | {"max_bots": 1, "num_bots": 1, "bot_policy": "random", "max_episode_steps": 30},
}
SEEDS = (3, 5, 11)


def _kernel_env(game, backend, num_envs, seed):
    from fasttrain import games

    spec = games.get(game)
    env = KernelEnv(spec, num_envs, backend, spec.make_params(**POPULATION_GAMES[game]), seed)
    env.reset(seed=seed)
    return env


def _assert_blocks_equal(population, solos, skip=("actions",)):
    """Every buffer of ``population`` but ``skip``, block k of rows (or envs), equals solo k's."""
    for name, array in population.arrays.items():
        if name in skip:
            continue
        blocks = np.split(array, len(solos))
        for k, solo in enumerate(solos):
            np.testing.assert_array_equal(blocks[k], solo.arrays[name], err_msg=f"{name} {k}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("game", POPULATION_GAMES)
def test_a_population_steps_block_by_block_as_its_solo_envs(game, backend):
    n, steps = 4, 200
    population = _kernel_env(game, backend, len(SEEDS) * n, SEEDS)
    solos = [_kernel_env(game, backend, n, seed) for seed in SEEDS]
    assert population.seed == SEEDS and [s.seed for s in solos] == list(SEEDS)
    _assert_blocks_equal(population, solos)
    gen = np.random.default_rng(0)
    ended = 0
    for _ in range(steps):
        actions = gen.integers(0, population.num_actions, population.num_rows)
        population.arrays["actions"][:] = actions
        for solo, block in zip(solos, np.split(actions, len(SEEDS)), strict=True):
            solo.arrays["actions"][:] = block
            assert solo.step() == -1
        assert population.step() == -1
        ended += int((population.arrays["terminated"] | population.arrays["truncated"]).sum())
        _assert_blocks_equal(population, solos)
    assert ended > 0  # the auto-resets were compared too
    # the blocks differ: each is its own seed's, not copies of one
    rng = np.split(population.arrays["rng"], len(SEEDS))
    assert not np.array_equal(rng[0], rng[1]) and not np.array_equal(rng[1], rng[2])


def test_one_seed_in_a_sequence_is_the_int_seed():
    env, ref = _kernel_env("snake", "cpu", 4, [7]), _kernel_env("snake", "cpu", 4, 7)
    assert env.seed == (7,) and ref.seed == 7
    _assert_blocks_equal(env, [ref])


def test_reset_with_seeds_makes_a_population_and_its_state_round_trips():
    env = _kernel_env("snake", "cpu", 6, 0)
    env.arrays["actions"][:] = 1
    env.step()
    env.reset(seed=np.array(SEEDS[:2], dtype=np.uint64))  # a 1-D integer array works too
    assert env.seed == SEEDS[:2] and all(type(s) is int for s in env.seed)
    solos = [_kernel_env("snake", "cpu", 3, s) for s in SEEDS[:2]]
    # a reset writes observations, not the last step's rewards, ends and final observations
    _assert_blocks_equal(
        env, solos, skip=("actions", "rewards", "terminated", "truncated", "final_obs")
    )
    env.arrays["actions"][:] = 2
    env.step()
    saved = env.state_dict()
    twin = _kernel_env("snake", "cpu", 6, 9)
    twin.load_state_dict(saved)
    for e in (env, twin):
        e.arrays["actions"][:] = 3
        e.step()
    _assert_blocks_equal(env, [twin])


@pytest.mark.parametrize(
    "seed, error, words",
    [
        ((), ValueError, ["seed", "non-empty sequence", "empty tuple"]),
        ([], ValueError, ["seed", "non-empty sequence", "empty list"]),
        ((1, 2, 3, 4, 5), ValueError, ["5 seeds", "num_envs = 6", "multiple"]),
        ((1, -2), ValueError, ["seed[1]", "[0, 2**64)", "-2"]),
        ((1, 2**64), ValueError, ["seed[1]", "[0, 2**64)"]),
        ((True, 2), TypeError, ["seed[0]", "int", "bool"]),
        ((1, 2.0), TypeError, ["seed[1]", "int", "float"]),
        (((1, 2), (3,)), TypeError, ["seed[0]", "int", "tuple"]),
        ([[1, 2]], TypeError, ["seed[0]", "int", "list"]),
        (np.zeros((2, 1), dtype=np.int64), TypeError, ["seed", "sequence", "2-D"]),
        (np.array([1.0, 2.0]), TypeError, ["seed[0]", "int", "float64"]),
        ("12", TypeError, ["seed", "int", "sequence", "str"]),
        ({1, 2}, TypeError, ["seed", "int", "sequence", "set"]),
        (1.5, TypeError, ["seed", "int", "sequence", "float"]),
    ],
)
def test_bad_population_seeds_get_one_line_changing_nothing(seed, error, words):
    from fasttrain import games

    spec = games.get("snake")
    with pytest.raises(error) as excinfo:
        KernelEnv(spec, 6, "cpu", spec.make_params(), seed=seed)
    env = _kernel_env("snake", "cpu", 6, 0)
    before = {name: array.copy() for name, array in env.arrays.items()}
    with pytest.raises(error) as reset_excinfo:
        env.reset(seed=seed)
    for info in (excinfo, reset_excinfo):
        message = str(info.value)
        assert "\n" not in message
        for word in words:
            assert word in message, message
    assert env.seed == 0
    for name, array in before.items():
        np.testing.assert_array_equal(env.arrays[name], array, err_msg=name)


# ------------------------------------------------------------------------------- memory layout


def _random_play(env, other, steps, rng, out=None):
    """Step ``env`` and ``other`` with the same random actions, ``env`` into ``out`` (its
    ``step_args``) on odd steps; every observation and final observation must agree."""
    obs, final_obs = (np.zeros_like(env.arrays["obs"]) for _ in range(2))
    bound = env.step_args(obs, final_obs)
    for t in range(steps):
        actions = rng.integers(0, env.num_actions, env.num_rows)
        env.arrays["actions"][:] = actions
        other.arrays["actions"][:] = actions
        assert env.step(bound if t % 2 else None) == -1 and other.step() == -1
        seen, finals = (obs, final_obs) if t % 2 else (env.arrays["obs"], env.arrays["final_obs"])
        np.testing.assert_array_equal(seen, other.arrays["obs"], err_msg=f"obs at step {t}")
        ended = other.arrays["terminated"] | other.arrays["truncated"]
        np.testing.assert_array_equal(finals[ended], other.arrays["final_obs"][ended])
        for name in ("rewards", "terminated", "truncated", "rng", *env.state):
            np.testing.assert_array_equal(env.arrays[name], other.arrays[name], err_msg=name)


@pytest.mark.parametrize("layout", ["obs-minor", "env-minor"])
@pytest.mark.parametrize("game", games.names())
def test_an_env_minor_layout_plays_as_env_major_bit_for_bit(game, layout):
    """The same game code over an env-minor observation stage (copied into rows after each step
    and reset) and, in ``env-minor``, env-minor state gives exactly the env-major trajectories."""
    spec = games.get(game)
    params = spec.make_params()
    minor = KernelEnv(spec, 5, "python", params, seed=7, layout=layout)
    major = KernelEnv(spec, 5, "python", params, seed=7)
    assert major.layout == "env-major"  # the host backends' own
    minor.reset()
    major.reset()
    np.testing.assert_array_equal(minor.arrays["obs"], major.arrays["obs"])
    _random_play(minor, major, 41, np.random.default_rng(0))  # the last step into its own
    # a state saved from either layout is the same plain arrays, and loads into the other
    saved = minor.state_dict()
    for name, array in major.state_dict().items():
        assert saved[name].flags.c_contiguous
        if name != "final_obs":  # the env's own final_obs missed the bound steps' episodes
            np.testing.assert_array_equal(saved[name], array, err_msg=name)
    minor.load_state_dict(major.state_dict())
    major.load_state_dict(saved)
    _random_play(major, minor, 10, np.random.default_rng(1))


def test_env_minor_arrays_put_one_envs_neighbour_beside_it():
    """Env-minor: element ``[i, k]`` sits beside ``[i + 1, k]``; the kernels' observation views
    are views of the stage, and the copy pair reads the stage and writes the bound rows."""
    spec = games.get("snake")
    env = KernelEnv(spec, 6, "python", spec.make_params(), layout="env-minor")
    for name in ("body", "grid"):
        array = env.arrays[name]
        assert array.shape == (6, 144) and array.strides == (array.itemsize, 6 * array.itemsize)
    seaquest = games.get("minatar-seaquest")
    fish = KernelEnv(seaquest, 6, "python", seaquest.make_params(), layout="env-minor")
    assert fish.arrays["fish"].strides[0] == fish.arrays["fish"].itemsize
    assert fish.arrays["fish"].flags.f_contiguous  # typed F by Numba: no strides at run time
    rows = KernelEnv(spec, 6, "python", spec.make_params(), layout="obs-minor")
    assert rows.arrays["body"].flags.c_contiguous and rows._stage.strides[0] == 1
    assert env.arrays["tail"].strides == (4,) and env.arrays["obs"].flags.c_contiguous
    obs = np.zeros_like(env.arrays["obs"])
    args = env.step_args(obs, np.zeros_like(obs))
    stage, rows = args.copy
    assert stage.shape == (576, 6) and stage.flags.c_contiguous
    assert np.shares_memory(rows, obs) and rows.shape == (6, 576)
    names = env._step_names
    for name in ("obs", "obs_flat", "obs_words"):
        view = args[names.index(name)]
        assert np.shares_memory(view, stage) and view.strides[0] == 1, name
    assert KernelEnv(spec, 6, "python", spec.make_params()).step_args(obs).copy is None


def test_an_unknown_layout_is_refused_in_one_line_naming_the_layouts():
    spec = games.get("snake")
    with pytest.raises(ValueError, match="layout must be one of env-major, obs-minor, env-minor"):
        KernelEnv(spec, 2, "python", spec.make_params(), layout="soa")

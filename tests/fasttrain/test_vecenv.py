"""VecEnv: zero-copy views, caller-owned observation buffers, input checks, stats."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import weakref

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import cuda_available, get_backend
from fasttrain.kernels.env import buffer_nbytes

VIEWS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")
SNAKE_BYTES_PER_ENV = buffer_nbytes(games.get("snake"), games.get("snake").make_params(), 1)


def _float_params(game: str) -> list:
    """The float fields of a game's params."""
    params = games.get(game).params_cls()
    return [f for f in dataclasses.fields(params) if isinstance(getattr(params, f.name), float)]


def _snapshot(env) -> dict:
    """Copies of every array except the action buffer (which a failed step may overwrite)."""
    return {name: a.copy() for name, a in env.arrays.items() if name != "actions"}


def _assert_unchanged(env, snapshot):
    for name, array in snapshot.items():
        np.testing.assert_array_equal(env.arrays[name], array, err_msg=name)


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message, message
    return message


# ------------------------------------------------------------------------------- zero copy


def test_views_share_memory_with_backend_arrays(snake):
    env = snake.make("cpu", num_envs=4)
    for name in VIEWS:
        assert np.shares_memory(getattr(env, name).numpy(), env.arrays[name]), name
    env.arrays["obs"][2, 1, 3, 4] = 7  # numpy -> torch
    assert env.obs[2, 1, 3, 4].item() == 7
    env.rewards[1] = 3.5  # torch -> numpy
    assert env.arrays["rewards"][1] == 3.5
    env.actions[:] = torch.tensor([0, 1, 2, 3])
    np.testing.assert_array_equal(env.arrays["actions"], [0, 1, 2, 3])
    for name, array in env.state.items():  # the state dict hands out the arrays themselves
        assert array is env.arrays[name]


def test_state_writes_drive_the_next_step(snake):
    env = snake.make("cpu", num_envs=2)
    snake.set(env, [(4, 0), (3, 0), (2, 0)], 0, fruit=(0, 4), i=1)
    env.actions[:] = 0
    env.step()  # actions=None: the ones already in env.actions
    assert snake.cells(env, 1) == [(3, 0), (2, 0), (1, 0)]
    assert env.obs[1, 1, 1, 0].item() == 1  # head channel


def test_buffers_never_move(snake):
    env = snake.make("cpu", num_envs=8)
    pointers = {name: getattr(env, name).data_ptr() for name in VIEWS}
    gen = np.random.default_rng(0)
    ended = 0
    for _ in range(300):
        obs, rewards, terminated, truncated = env.step(gen.integers(0, 4, 8))
        ended += int((terminated | truncated).sum())
        assert obs.data_ptr() == pointers["obs"] and rewards.data_ptr() == pointers["rewards"]
        assert terminated.data_ptr() == pointers["terminated"]
        assert truncated.data_ptr() == pointers["truncated"]
    env.reset(seed=4)
    assert ended > 0
    assert {name: getattr(env, name).data_ptr() for name in VIEWS} == pointers
    assert all(np.shares_memory(getattr(env, n).numpy(), env.arrays[n]) for n in VIEWS)


def test_obs_out_writes_into_the_given_slot(snake):
    env = snake.make("cpu", num_envs=8, seed=5)
    twin = snake.make("cpu", num_envs=8, seed=5)
    num_steps = 40
    storage = torch.zeros((num_steps, 8, *env.obs_shape), dtype=env.obs_dtype)
    final_storage = torch.zeros_like(storage)
    obs_before = env.obs.clone()
    gen = np.random.default_rng(6)
    ended = 0
    for t in range(num_steps):
        actions = gen.integers(0, 4, 8)
        out, rewards, terminated, truncated = env.step(
            actions, obs_out=storage[t], final_obs_out=final_storage[t]
        )
        twin.step(actions)
        assert out.data_ptr() == storage[t].data_ptr()
        assert torch.equal(storage[t], twin.obs)
        assert torch.equal(rewards, twin.rewards) and torch.equal(terminated, twin.terminated)
        done = terminated | truncated
        ended += int(done.sum())
        assert torch.equal(final_storage[t][done], twin.final_obs[done])
        assert not final_storage[t][~done].any()  # only ended rows are written
        if t + 1 < num_steps:
            assert not storage[t + 1 :].any()  # later slots are untouched
    assert ended > 0
    assert torch.equal(env.obs, obs_before)  # the env's own buffer was not written


@pytest.mark.parametrize(
    "make_out, error",
    [
        (lambda env: torch.zeros((9, *env.obs_shape), dtype=env.obs_dtype), "shape"),
        (lambda env: torch.zeros((8, *env.obs_shape[1:]), dtype=env.obs_dtype), "shape"),
        (lambda env: torch.zeros((8, *env.obs_shape), dtype=torch.float32), "uint8"),
        (  # (8, 4, 5, 5) but channels last in memory
            lambda env: torch.zeros((8, 5, 5, 4), dtype=env.obs_dtype).permute(0, 3, 1, 2),
            "contiguous",
        ),
    ],
)
def test_bad_obs_out_raises_before_stepping(snake, make_out, error):
    env = snake.make("cpu", num_envs=8)
    snapshot = _snapshot(env)
    with pytest.raises(ValueError, match=error):
        env.step(np.zeros(8, dtype=np.int64), obs_out=make_out(env))
    _assert_unchanged(env, snapshot)


def test_bad_obs_out_at_a_previously_used_address_raises(snake):
    env = snake.make("cpu", num_envs=8)
    storage = torch.zeros((3, 8, *env.obs_shape), dtype=env.obs_dtype)
    env.step(np.zeros(8, dtype=np.int64), obs_out=storage[0])
    snapshot = _snapshot(env)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(8, dtype=np.int64), obs_out=storage)  # same data_ptr as storage[0]
    _assert_unchanged(env, snapshot)


@pytest.mark.parametrize("backend", ["python", "cpu"])
def test_bound_outputs_step_like_obs_out(snake, backend):
    env = snake.make(backend, num_envs=8, seed=5)
    twin = snake.make(backend, num_envs=8, seed=5)
    num_steps = 30
    storage = torch.zeros((num_steps, 8, *env.obs_shape), dtype=env.obs_dtype)
    final_storage = torch.zeros_like(storage)
    twin_storage, twin_final = torch.zeros_like(storage), torch.zeros_like(storage)
    outputs = [env.bind_outputs(storage[t], final_storage[t]) for t in range(num_steps)]
    gen = np.random.default_rng(6)
    for t in range(num_steps):
        actions = gen.integers(0, 4, 8)
        obs, rewards, terminated, _ = env.step(actions, out=outputs[t])
        twin.step(actions, obs_out=twin_storage[t], final_obs_out=twin_final[t])
        assert obs is outputs[t].obs and obs.data_ptr() == storage[t].data_ptr()
        assert torch.equal(rewards, twin.rewards) and torch.equal(terminated, twin.terminated)
    assert torch.equal(storage, twin_storage) and torch.equal(final_storage, twin_final)
    assert final_storage.any()  # some episodes ended, so final observations were compared
    for name in env.arrays:
        np.testing.assert_array_equal(env.arrays[name], twin.arrays[name], err_msg=name)


def test_fresh_obs_out_every_step_keeps_only_a_few_buffers_alive(snake):
    env = snake.make("cpu", num_envs=8)
    alive = []
    for _ in range(100):
        # a NumPy base under the tensor: it lives as long as anything views the tensor's memory
        base = np.zeros((8, *env.obs_shape), dtype=np.uint8)
        alive.append(weakref.ref(base))
        env.step(np.zeros(8, dtype=np.int64), obs_out=torch.from_numpy(base))
        del base
    gc.collect()
    assert alive[0]() is None
    assert sum(ref() is not None for ref in alive) <= 8
    assert alive[-1]() is not None  # the last few stay bound, so reusing them costs nothing


def test_bound_outputs_live_as_long_as_the_caller_keeps_them(snake):
    env, twin = snake.make("cpu", num_envs=8), snake.make("cpu", num_envs=8)
    base = np.zeros((8, *env.obs_shape), dtype=np.uint8)
    ref = weakref.ref(base)
    outputs = env.bind_outputs(torch.from_numpy(base))
    del base
    actions = np.zeros(8, dtype=np.int64)
    for _ in range(20):  # more than the obs_out cache holds
        env.step(actions, obs_out=torch.zeros_like(env.obs))
        twin.step(actions)
    gc.collect()
    assert ref() is not None
    env.step(actions, out=outputs)
    twin.step(actions)
    assert np.array_equal(ref(), twin.arrays["obs"]) and ref().any()
    del outputs
    gc.collect()
    assert ref() is None


def _slot_at(buffer, offset):
    """A ``buffer[0]``-shaped view starting ``offset`` elements into ``buffer``'s memory."""
    size = buffer[0].numel()
    return buffer.view(-1)[offset : offset + size].view(buffer[0].shape)


@pytest.mark.parametrize(
    "make_outs",
    [
        lambda env, buf: dict(obs_out=buf[0], final_obs_out=buf[0]),  # the same slot twice
        lambda env, buf: dict(obs_out=_slot_at(buf, 0), final_obs_out=_slot_at(buf, 100)),
        lambda env, buf: dict(obs_out=env.final_obs),  # final_obs_out defaults to env.final_obs
        lambda env, buf: dict(final_obs_out=env.obs),  # obs_out defaults to env.obs
    ],
)
def test_overlapping_outputs_are_refused_and_nothing_steps(snake, make_outs):
    env = snake.make("cpu", num_envs=8)
    buffer = torch.zeros((2, 8, *env.obs_shape), dtype=env.obs_dtype)
    outs = make_outs(env, buffer)
    snapshot = _snapshot(env)
    actions = env.actions.clone()
    with pytest.raises(ValueError) as excinfo:
        env.step(np.full(8, 3, dtype=np.int64), **outs)
    message = _one_line(excinfo)
    assert "obs_out" in message and "final_obs_out" in message and "overlap" in message
    _assert_unchanged(env, snapshot)
    assert torch.equal(env.actions, actions)
    assert not buffer.any()
    with pytest.raises(ValueError, match="overlap"):
        env.bind_outputs(**outs)


@pytest.mark.parametrize("backend", ["python", "cpu"])
def test_numpy_outputs_are_written_on_host_backends(snake, backend):
    env = snake.make(backend, num_envs=8, seed=3)
    twin = snake.make(backend, num_envs=8, seed=3)
    obs_out = np.zeros((8, *env.obs_shape), dtype=np.uint8)
    final_obs_out = np.zeros_like(obs_out)
    gen = np.random.default_rng(2)
    ended = 0
    for _ in range(40):
        actions = gen.integers(0, 4, 8)
        obs, *_ = env.step(actions, obs_out=obs_out, final_obs_out=final_obs_out)
        twin.step(actions)
        assert obs is obs_out
        np.testing.assert_array_equal(obs_out, twin.obs.numpy())
        done = (twin.terminated | twin.truncated).numpy()
        ended += int(done.sum())
        np.testing.assert_array_equal(final_obs_out[done], twin.final_obs.numpy()[done])
    assert ended > 0


@pytest.mark.parametrize(
    "make_out, words",
    [
        (lambda shape: np.zeros(shape, dtype=np.float32), ["obs_out", "uint8", "float32"]),
        (lambda shape: np.zeros(shape, dtype=np.uint8)[:4], ["obs_out", "shape", "(8, 4, 5, 5)"]),
        (lambda shape: np.zeros(shape[::-1], dtype=np.uint8).T, ["obs_out", "contiguous"]),
        (lambda shape: np.broadcast_to(np.zeros(shape[1:], np.uint8), shape), ["writable"]),
        (lambda shape: [[0]] * 8, ["obs_out", "torch.Tensor", "numpy.ndarray", "list"]),
    ],
)
def test_bad_numpy_or_other_outputs_raise_one_line(snake, make_out, words):
    env = snake.make("cpu", num_envs=8)
    snapshot = _snapshot(env)
    with pytest.raises((TypeError, ValueError)) as excinfo:
        env.step(np.zeros(8, dtype=np.int64), obs_out=make_out((8, *env.obs_shape)))
    message = _one_line(excinfo)
    for word in words:
        assert word in message
    _assert_unchanged(env, snapshot)


def test_step_out_must_come_from_this_envs_bind_outputs(snake):
    env = snake.make("cpu", num_envs=8)
    other = snake.make("cpu", num_envs=8)
    slot = torch.zeros_like(env.obs)
    snapshot = _snapshot(env)
    cases = [
        (dict(out=other.bind_outputs(slot)), ValueError, ["another env"]),
        (dict(out=slot), TypeError, ["out", "bind_outputs", "Tensor"]),
        (dict(out=env.bind_outputs(slot), obs_out=slot), ValueError, ["out", "obs_out"]),
    ]
    for kwargs, error, words in cases:
        with pytest.raises(error) as excinfo:
            env.step(np.zeros(8, dtype=np.int64), **kwargs)
        message = _one_line(excinfo)
        assert all(word in message for word in words), message
    _assert_unchanged(env, snapshot)
    assert not slot.any()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_cuda_steps_into_bound_tensors_and_refuses_numpy_outputs_in_one_line():
    env = fasttrain.make("snake", num_envs=8, backend="cuda")
    twin = fasttrain.make("snake", num_envs=8, backend="cuda")
    with pytest.raises(TypeError) as excinfo:
        env.bind_outputs(np.zeros((8, *env.obs_shape), dtype=np.uint8))
    message = _one_line(excinfo)
    assert "torch.Tensor" in message and "cuda" in message and "ndarray" in message
    slots = torch.zeros((2, *env.obs.shape), dtype=env.obs_dtype, device=env.device)
    obs_slot, final_slot = slots[0], slots[1]  # each indexing makes a new view object
    out = env.bind_outputs(obs_slot, final_slot)
    actions = torch.ones(8, dtype=torch.int64, device=env.device)
    obs, *_ = env.step(actions, out=out)
    twin.step(actions)
    assert obs is obs_slot and torch.equal(obs_slot, twin.obs) and obs_slot.any()


# ------------------------------------------------------------------------------- bad actions


@pytest.mark.parametrize("backend", ["python", "cpu"])
@pytest.mark.parametrize("bad", [-1, 4, 2**40])
def test_out_of_range_actions_change_nothing(snake, backend, bad):
    env = snake.make(backend, num_envs=5, seed=1)
    env.step(np.array([1, 2, 1, 2, 1]))
    snapshot = _snapshot(env)
    actions = np.array([0, 1, 2, 3, bad])  # the bad one comes last: every env is checked first
    with pytest.raises(ValueError) as excinfo:
        env.step(actions)
    message = str(excinfo.value)
    assert "0..3" in message and "env 4" in message and str(bad) in message
    _assert_unchanged(env, snapshot)
    env.step(np.array([0, 1, 2, 3, 0]))  # and the env still steps afterwards


@pytest.mark.parametrize(
    "actions, error, words",
    [
        (np.zeros(4, dtype=np.int64), ValueError, ["(5,)", "(4,)"]),
        (np.zeros((5, 1), dtype=np.int64), ValueError, ["(5,)", "(5, 1)"]),
        (torch.zeros(6, dtype=torch.int64), ValueError, ["(5,)", "(6,)"]),
        (np.zeros(5, dtype=np.float64), TypeError, ["integer", "float64"]),
        (torch.zeros(5, dtype=torch.float32), TypeError, ["integer", "float32"]),
        (torch.zeros(5, dtype=torch.bool), TypeError, ["integer", "bool"]),
        ([0, 1, 2, 3, 0], TypeError, ["torch.Tensor", "numpy.ndarray", "(5,)", "list"]),
        (np.array([0, 1, 2, 3, 2**63], dtype=np.uint64), ValueError, ["0..3"]),
    ],
)
def test_malformed_actions_raise_clear_errors_and_change_nothing(snake, actions, error, words):
    env = snake.make("cpu", num_envs=5, seed=1)
    snapshot = _snapshot(env)
    with pytest.raises(error) as excinfo:
        env.step(actions)
    for word in words:
        assert word in str(excinfo.value)
    _assert_unchanged(env, snapshot)


@pytest.mark.parametrize(
    "actions",
    [
        np.array([0, 1, 2, 3, 1], dtype=np.int8),
        np.array([0, 1, 2, 3, 1], dtype=np.uint16),
        torch.tensor([0, 1, 2, 3, 1], dtype=torch.int32),
        torch.tensor([0, 1, 2, 3, 1]),
    ],
)
def test_any_integer_actions_are_accepted(snake, actions):
    env = snake.make("cpu", num_envs=5, seed=1)
    env.step(actions)
    np.testing.assert_array_equal(env.arrays["actions"], [0, 1, 2, 3, 1])


# ------------------------------------------------------------------------------- make()


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(game="snek"), ValueError, ["snek", "snake"]),
        (dict(heigth=8), ValueError, ["heigth", "height", "width", "reward_fruit"]),
        (dict(height=8.0), TypeError, ["height", "int"]),
        (dict(reward_fruit="1"), TypeError, ["reward_fruit", "float"]),
        (dict(backend="gpu"), ValueError, ["gpu", "python", "cpu", "cuda", "auto"]),
        (dict(num_envs=0), ValueError, ["num_envs", ">= 1"]),
        (dict(num_envs=2.0), TypeError, ["num_envs", "int"]),
        (dict(seed=True), TypeError, ["seed", "int", "bool"]),
        (dict(seed=1.5), TypeError, ["seed", "int"]),
        (dict(seed=np.float64(3)), TypeError, ["seed", "int", "float64"]),
        (dict(seed=-1), ValueError, ["seed", "[0, 2**64)", "-1"]),
        (dict(seed=2**64), ValueError, ["seed", "[0, 2**64)"]),
        (
            dict(reward_fruit=float("nan")),
            ValueError,
            ["snake.reward_fruit must be finite, got nan"],
        ),
        (dict(reward_death=-float("inf")), ValueError, ["snake.reward_death", "finite", "-inf"]),
        (dict(reward_step=10**400), ValueError, ["snake.reward_step", "finite"]),
        (dict(max_episode_steps=2**63), ValueError, ["snake.max_episode_steps", "int64"]),
        (dict(num_envs=10**12), MemoryError, [f"{SNAKE_BYTES_PER_ENV * 10**12:,} bytes"]),
    ],
)
def test_make_rejects_bad_arguments_naming_valid_choices(kwargs, error, words):
    kwargs = {"game": "snake", "num_envs": 2, "backend": "cpu", **kwargs}
    with pytest.raises(error) as excinfo:
        fasttrain.make(**kwargs)
    for word in words:
        assert word in str(excinfo.value)
    _one_line(excinfo)


def test_buffer_bytes_are_what_the_env_holds(snake):
    env = snake.make("cpu", num_envs=3)
    assert buffer_nbytes(env.spec, env.params, 3) == env.nbytes
    assert buffer_nbytes(env.spec, games.get("snake").make_params(), 1) == SNAKE_BYTES_PER_ENV


@pytest.mark.parametrize(
    "game, name", [(g, f.name) for g in games.names() for f in _float_params(g)]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -np.inf, np.float32("nan")])
def test_every_float_param_must_be_finite(game, name, value):
    with pytest.raises(ValueError) as excinfo:
        games.get(game).make_params(**{name: value})
    assert _one_line(excinfo) == f"{game}.{name} must be finite, got {float(value)}"


def test_numpy_scalars_are_accepted_as_params():
    params = games.get("snake").make_params(reward_fruit=np.float32(0.5), height=np.int64(6))
    assert params.reward_fruit == 0.5 and params.height == 6


@pytest.mark.parametrize("seed", [np.uint64(3), np.uint8(3), np.int32(3)])
def test_numpy_integer_seeds_act_like_python_ints(snake, seed):
    env, ref = snake.make("cpu", num_envs=4, seed=seed), snake.make("cpu", num_envs=4, seed=3)
    np.testing.assert_array_equal(env.arrays["rng"], ref.arrays["rng"])
    assert torch.equal(env.obs, ref.obs)
    env.reset(seed=type(seed)(7))
    ref.reset(seed=7)
    np.testing.assert_array_equal(env.arrays["rng"], ref.arrays["rng"])
    assert torch.equal(env.obs, ref.obs)


def test_the_largest_seed_is_accepted(snake):
    env = snake.make("cpu", num_envs=4, seed=np.uint64(2**64 - 1))
    ref = snake.make("cpu", num_envs=4, seed=2**64 - 1)
    np.testing.assert_array_equal(env.arrays["rng"], ref.arrays["rng"])
    assert not np.array_equal(env.arrays["rng"], snake.make("cpu", num_envs=4).arrays["rng"])


@pytest.mark.parametrize(
    "seed, error",
    [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), (False, TypeError), ("3", TypeError)],
)
def test_reset_rejects_bad_seeds_in_one_line_changing_nothing(snake, seed, error):
    env = snake.make("cpu", num_envs=2)
    snapshot = _snapshot(env)
    with pytest.raises(error) as excinfo:
        env.reset(seed=seed)
    assert "seed" in _one_line(excinfo)
    _assert_unchanged(env, snapshot)


def test_reset_rejects_bool_seed(snake):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(TypeError, match="seed"):
        env.reset(seed=False)


def test_render_rejects_bad_index(snake):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(IndexError, match=r"\[0, 2\)"):
        env.render(2)


@pytest.mark.parametrize(
    "index, error, words",
    [
        (1.5, TypeError, ["env index", "int", "1.5"]),
        (True, TypeError, ["env index", "int", "bool"]),
        (np.float64(0), TypeError, ["env index", "int", "float64"]),
        (-1, IndexError, ["-1", "[0, 2)"]),
        (np.int64(2), IndexError, ["[0, 2)"]),
    ],
)
def test_render_refuses_bad_indices_in_one_line(snake, index, error, words):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(error) as excinfo:
        env.render(index)
    message = _one_line(excinfo)
    assert all(word in message for word in words), message


def test_render_takes_numpy_integers(snake):
    env = snake.make("cpu", num_envs=2)
    snake.set(env, [(4, 0), (3, 0), (2, 0)], 0, fruit=(0, 4), i=1)
    assert env.render(np.int64(1)) == env.render(np.uint8(1)) == env.render(1) != env.render(0)


def test_load_state_dict_wants_a_dict_in_one_line(snake):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(TypeError) as excinfo:
        env.load_state_dict(env.arrays["obs"])
    assert "dict" in _one_line(excinfo)


@pytest.mark.skipif(cuda_available(), reason="a usable GPU is present")
def test_cuda_backend_without_gpu_explains_what_to_install():
    with pytest.raises(RuntimeError) as excinfo:
        fasttrain.make("snake", num_envs=2, backend="cuda")
    message = str(excinfo.value)
    assert "cuda" in message
    if importlib.util.find_spec("cupy") is None:  # the extra is missing: say how to get it
        assert "fasttrain[cuda]" in message


# ------------------------------------------------------------------------------- stats


def test_stats_means_then_clear(snake):
    env = snake.make("cpu", num_envs=2, reward_fruit=1.0, reward_death=-1.0)
    assert env.stats() == {}
    snake.set(env, [(2, 2), (2, 3), (2, 4)], 1, fruit=(0, 0), i=0)  # right: wall after 1 move
    snake.set(env, [(1, 0), (2, 0), (3, 0)], 2, fruit=(4, 0), i=1)  # down: fruit, then wall
    env.step(np.array([0, 2]))  # env 0 turns up to (1, 4); env 1 eats at (4, 0)
    assert env.stats() == {}
    env.step(np.array([1, 2]))  # env 0 off the right edge, env 1 off the bottom edge
    assert env.terminated.tolist() == [True, True]
    # env 0: return -1 over 2 steps, score 0; env 1: return 1 - 1 over 2 steps, score 1
    assert env.stats() == {"return": -0.5, "length": 2.0, "score": 0.5, "episodes": 2}
    assert env.stats() == {}


# ------------------------------------------------------------------------------- set_params

# the 10x10 arena of tests/fasttrain/games/test_arena.py: two agents, two bot slots (one active)
BOT_ARENA = {"width": 10, "height": 10, "vision": 2, "num_snakes": 2, "num_food": 0}
BOT_ARENA |= {"max_bots": 2, "num_bots": 1, "bot_policy": "greedy"}


def _arena(backend="cpu", seed=0, **params):
    return fasttrain.make("arena", num_envs=1, backend=backend, seed=seed, **BOT_ARENA | params)


def _eat_and_die(env):
    """Agent 0 eats the food to its right, agent 1 runs up into the wall; the bot is far off.
    Returns the two rewards."""
    from tests.fasttrain.games.test_arena import place

    place(env, [[(4, 2), (4, 3)], [(2, 7)], [(7, 2)], []], food=[(4, 4)])
    _, rewards, terminated, _ = env.step(np.array([3, 0]))
    assert terminated.tolist() == [False, True]
    return rewards.tolist()


def _addresses(env) -> dict:
    out = {name: array.__array_interface__["data"][0] for name, array in env.arrays.items()}
    out |= {f"view {name}": getattr(env, name).data_ptr() for name in VIEWS}
    return out


@pytest.mark.parametrize("backend", ["python", "cpu"])
def test_set_params_changes_rewards_from_the_next_step(backend):
    env = _arena(backend)
    assert _eat_and_die(env) == pytest.approx([0.1, -1.0])
    env.set_params(reward_food=0.75, reward_death=-3.0)
    assert env.params.reward_food == 0.75 and env.params.num_bots == 1  # the others kept
    assert _eat_and_die(env) == [0.75, -3.0]
    env.set_params(reward_food=2)  # an int for a float param
    assert _eat_and_die(env) == [2.0, -3.0]


def test_set_params_neither_recompiles_nor_reallocates():
    env = _arena()
    gen = np.random.default_rng(0)
    env.step(gen.integers(0, 4, env.num_rows))
    launchers = get_backend("cpu").compile(env.spec)
    compiled, addresses = launchers.num_compiled(), _addresses(env)
    arrays = dict(env.arrays)
    changes = [
        {"num_bots": 2, "bot_policy": "random"},
        {"bot_policy": "cautious", "num_food": 5, "reward_corpse": 0.5},
        {"leave_corpse_on_death": False, "max_episode_steps": 7, "reward_death": -0.5},
        {"num_bots": 0, "num_food": 1},
        {"width": 10, "max_bots": 2},  # shape params given their own values: no change
    ]
    for change in changes:
        env.set_params(**change)
        for _ in range(20):
            env.step(gen.integers(0, 4, env.num_rows))
        env.reset()
    assert launchers.num_compiled() == compiled
    assert _addresses(env) == addresses
    assert all(env.arrays[name] is array for name, array in arrays.items())
    assert np.shares_memory(env.obs.numpy(), env.arrays["obs"])


def test_set_params_with_numpy_integers_does_not_recompile():
    env = _arena()
    env.step(np.zeros(env.num_rows, np.int64))
    launchers = get_backend("cpu").compile(env.spec)
    compiled = launchers.num_compiled()
    env.set_params(num_food=np.int32(3), max_episode_steps=np.uint8(9))
    env.step(np.zeros(env.num_rows, np.int64))
    assert launchers.num_compiled() == compiled


@pytest.mark.parametrize(
    "name, value",
    [
        ("max_bots", 3),
        ("width", 12),
        ("height", 12),
        ("num_snakes", 3),
        ("vision", 1),
        ("max_snake_length", 32),
    ],
)
def test_set_params_refuses_a_shape_param_in_one_line_changing_nothing(name, value):
    env, twin = _arena(seed=4), _arena(seed=4)
    gen = np.random.default_rng(1)
    actions = gen.integers(0, 4, (30, env.num_rows))
    for t in range(10):
        env.step(actions[t])
        twin.step(actions[t])
    params, snapshot = env.params, _snapshot(env)
    with pytest.raises(ValueError) as excinfo:
        env.set_params(reward_food=0.5, **{name: value})
    assert _one_line(excinfo) == (
        f"game 'arena' parameter {name!r} sets buffer shapes and cannot change after the "
        "environments are made"
    )
    assert env.params is params and env.params.reward_food == 0.1
    _assert_unchanged(env, snapshot)
    for t in range(10, 30):  # and it plays on exactly as an env that was never asked
        env.step(actions[t])
        twin.step(actions[t])
        for key in env.arrays:
            np.testing.assert_array_equal(env.arrays[key], twin.arrays[key], err_msg=key)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (
            {"bot_policy": "smart"},
            ValueError,
            "game 'arena' parameter 'bot_policy' must be one of random, greedy, cautious; got "
            "'smart'",
        ),
        ({"num_bots": 3}, ValueError, "arena num_bots must be in 0..max_bots = 2, got 3"),
        (
            {"reward_food": "high"},
            TypeError,
            "game 'arena' parameter 'reward_food' must be float, got str 'high'",
        ),
        ({"reward_food": float("nan")}, ValueError, "arena.reward_food must be finite, got nan"),
        ({"num_food": 2.5}, TypeError, "game 'arena' parameter 'num_food' must be int, got float"),
        ({"reward_food": 0.5, "speed": 2}, ValueError, "unknown parameter(s) ['speed']"),
    ],
)
def test_set_params_with_a_bad_value_raises_the_make_params_error_changing_nothing(
    overrides, error, message
):
    env, twin = _arena(seed=2), _arena(seed=2)
    params, snapshot = env.params, _snapshot(env)
    with pytest.raises(error) as excinfo:
        env.set_params(**overrides)
    assert _one_line(excinfo).startswith(message)
    assert env.params is params
    _assert_unchanged(env, snapshot)
    gen = np.random.default_rng(3)
    for _ in range(15):
        actions = gen.integers(0, 4, env.num_rows)
        env.step(actions)
        twin.step(actions)
    for key in env.arrays:
        np.testing.assert_array_equal(env.arrays[key], twin.arrays[key], err_msg=key)


@pytest.mark.parametrize("backend", ["python", "cpu"])
@pytest.mark.parametrize("how", ["bind_outputs", "obs_out"])
def test_outputs_bound_before_set_params_step_with_the_new_values(backend, how):
    """Outputs bound (or cached for obs_out) before set_params carry the new params: rewards
    and bot moves follow the change, observations still land in the caller's buffers."""
    from tests.fasttrain.games.test_arena import cells, place

    env = _arena(backend, num_bots=1)
    storage = torch.zeros((3, env.num_rows, *env.obs_shape), dtype=env.obs_dtype)
    finals = torch.zeros_like(storage)
    bound = [env.bind_outputs(storage[t], finals[t]) for t in range(3)]

    def play(t):
        # agent 0 eats the food at (4, 4); the bot at (6, 4) heads for (5, 5): up (first) and
        # right tie, but up, (5, 4), is next to the agent's new head, which cautious avoids
        place(env, [[(4, 2), (4, 3)], [(7, 7)], [(6, 4)], []], food=[(4, 4), (5, 5)])
        env.obs.fill_(255)
        slot = t if how == "bind_outputs" else 0  # obs_out: the one slot, cached at step 0
        kwargs = {"out": bound[t]} if how == "bind_outputs" else {"obs_out": storage[0]}
        obs, rewards, _, _ = env.step(np.array([3, 0]), **kwargs)
        assert obs.data_ptr() == storage[slot].data_ptr()
        assert bool((env.obs == 255).all())  # the env's own buffer was not written
        # agent 0's window: its head in the centre, its body left of it
        v = env.params.vision
        assert obs[0, v, v] == 4 and obs[0, v, v - 1] == 4 and obs[0, v, v + 1] == 0
        return rewards.tolist(), cells(env, 2)

    rewards, bot = play(0)
    assert rewards == pytest.approx([0.1, 0.0]) and bot == [(5, 4)]
    env.set_params(reward_food=0.5, reward_death=-2.0)
    rewards, bot = play(1)
    assert rewards == [0.5, 0.0] and bot == [(5, 4)]
    env.set_params(bot_policy="cautious", reward_food=1.5)
    rewards, bot = play(2)
    assert rewards == [1.5, 0.0] and bot == [(6, 5)]


# ------------------------------------------------------------------------------- populations

POPULATION_GAMES = {
    "snake": {"height": 5, "width": 5},
    "minatar-breakout": {"max_episode_steps": 40},
    "arena": BOT_ARENA | {"num_food": 2, "bot_policy": "random", "max_episode_steps": 30},
}


@pytest.mark.parametrize("backend", ["python", "cpu"])
@pytest.mark.parametrize("game", POPULATION_GAMES)
def test_make_with_seeds_steps_each_block_as_its_solo_env(game, backend):
    seeds, n = (3, 5, 11), 4
    params = POPULATION_GAMES[game]
    population = fasttrain.make(game, num_envs=3 * n, backend=backend, seed=seeds, **params)
    solos = [fasttrain.make(game, num_envs=n, backend=backend, seed=s, **params) for s in seeds]
    assert population.seed == seeds and solos[1].seed == 5
    rows = n * population.num_agents
    gen = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(200):
        actions = torch.randint(0, population.num_actions, (population.num_rows,), generator=gen)
        outs = population.step(actions)
        ended += int((outs[2] | outs[3]).sum())
        for k, solo in enumerate(solos):
            block = slice(k * rows, (k + 1) * rows)
            for mine, theirs in zip(outs, solo.step(actions[block]), strict=True):
                assert torch.equal(mine[block], theirs)
            assert np.array_equal(population.arrays["score"][block], solo.arrays["score"])
            for name, array in population.state.items():  # one row per environment
                assert np.array_equal(array[k * n : (k + 1) * n], solo.state[name]), name
    assert ended > 0
    state = population.state_dict()
    twin = fasttrain.make(game, num_envs=3 * n, backend=backend, **params)
    twin.load_state_dict(state)  # no seed in it: the rng words carry each block's streams
    for _ in range(20):
        actions = torch.randint(0, population.num_actions, (population.num_rows,), generator=gen)
        for mine, theirs in zip(population.step(actions), twin.step(actions), strict=True):
            assert torch.equal(mine, theirs)


@pytest.mark.parametrize(
    "seed, error, words",
    [
        ((), ValueError, ["seed", "non-empty sequence of such ints", "empty tuple"]),
        ([1, 2, 3, 4, 5], ValueError, ["5 seeds do not divide num_envs = 6"]),
        ([1, -1], ValueError, ["seed[1] must be an int in [0, 2**64), got -1"]),
        ([1, True], TypeError, ["seed[1] must be an int in [0, 2**64), got bool True"]),
        ([0.5, 1], TypeError, ["seed[0] must be an int in [0, 2**64), got float 0.5"]),
        ([[1], [2]], TypeError, ["seed[0] must be an int in [0, 2**64), got list [1]"]),
    ],
)
def test_bad_population_seeds_are_refused_in_one_line(snake, seed, error, words):
    with pytest.raises(error) as excinfo:
        fasttrain.make("snake", num_envs=6, backend="cpu", seed=seed)
    env = snake.make("cpu", num_envs=6)
    snapshot = _snapshot(env)
    with pytest.raises(error) as reset_excinfo:
        env.reset(seed=seed)
    _assert_unchanged(env, snapshot)
    for info in (excinfo, reset_excinfo):
        for word in words:
            assert word in _one_line(info)

"""VecEnv: zero-copy views, caller-owned observation buffers, input checks, stats."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain.kernels import cuda_available

VIEWS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")


def _snapshot(env) -> dict:
    """Copies of every array except the action buffer (which a failed step may overwrite)."""
    return {name: a.copy() for name, a in env.arrays.items() if name != "actions"}


def _assert_unchanged(env, snapshot):
    for name, array in snapshot.items():
        np.testing.assert_array_equal(env.arrays[name], array, err_msg=name)


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
    ],
)
def test_make_rejects_bad_arguments_naming_valid_choices(kwargs, error, words):
    kwargs = {"game": "snake", "num_envs": 2, "backend": "cpu", **kwargs}
    with pytest.raises(error) as excinfo:
        fasttrain.make(**kwargs)
    for word in words:
        assert word in str(excinfo.value)


def test_reset_rejects_bool_seed(snake):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(TypeError, match="seed"):
        env.reset(seed=False)


def test_render_rejects_bad_index(snake):
    env = snake.make("cpu", num_envs=2)
    with pytest.raises(IndexError, match=r"\[0, 2\)"):
        env.render(2)


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

"""The contract every registered game meets, checked on the cpu backend.

Parametrized over ``fasttrain.games.names()``: a new game gets the whole suite for free.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree, get_backend

GAMES = games.names()


def _random_actions(env, num_steps, seed):
    gen = np.random.default_rng(seed)
    return gen.integers(0, env.num_actions, (num_steps, env.num_envs), dtype=np.int64)


def _call(fn, env, arrays, i):
    """Call a game's scalar ``fn`` on env ``i``, arguments bound by name as the runtime does."""
    source = {
        **arrays,
        "obs_flat": arrays["obs"].reshape(env.num_envs, -1),
        **env.spec.param_values(env.params),
    }
    names = list(inspect.signature(fn).parameters)[1:]
    with np.errstate(over="ignore"):
        fn(i, *[source[name] for name in names])


def test_registry_lists_snake():
    assert "snake" in GAMES
    assert GAMES == sorted(GAMES)


@pytest.mark.parametrize("game", GAMES)
def test_shapes_dtypes_and_value_ranges(game):
    spec = games.get(game)
    env = fasttrain.make(game, num_envs=16, backend="cpu", seed=1)
    expected_shape = tuple(spec.obs_shape(env.params))
    assert env.obs_shape == expected_shape
    assert tuple(env.obs.shape) == (16, *expected_shape)
    assert tuple(env.final_obs.shape) == (16, *expected_shape)
    obs_dtype = torch.from_numpy(np.zeros(1, dtype=spec.obs_dtype)).dtype
    assert env.obs.dtype == obs_dtype == env.obs_dtype
    assert env.num_actions == spec.num_actions >= 1
    for actions in _random_actions(env, 300, seed=2):
        obs, rewards, terminated, truncated = env.step(actions)
        assert obs.data_ptr() == env.obs.data_ptr() and obs.dtype == obs_dtype
        assert rewards.dtype == torch.float32 and rewards.shape == (16,)
        assert torch.isfinite(rewards).all()
        assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
        assert not (terminated & truncated).any()
        if obs_dtype.is_floating_point:
            assert torch.isfinite(obs).all()


@pytest.mark.parametrize("game", GAMES)
def test_auto_reset_final_obs_and_stats_match_reference(game):
    """Every ended row: final_obs is step_one's observation, then reset_one ran on the row."""
    env = fasttrain.make(game, num_envs=16, backend="cpu", seed=3)
    state_names = [f.name for f in env.spec.state]
    running_return = np.zeros(16)
    running_length = np.zeros(16, dtype=np.int64)
    ended_returns, ended_lengths, ended_scores = [], [], []
    for actions in _random_actions(env, 400, seed=4):
        before = {name: array.copy() for name, array in env.arrays.items()}
        env.step(actions)
        running_return += env.rewards.numpy()
        running_length += 1
        done = (env.terminated | env.truncated).numpy()
        for i in np.flatnonzero(done):
            ref = {name: array.copy() for name, array in before.items()}
            ref["actions"][:] = actions
            _call(env.spec.step_one, env, ref, i)
            np.testing.assert_array_equal(env.final_obs[i].numpy(), ref["obs"][i])
            assert env.rewards[i].item() == ref["rewards"][i]
            assert env.terminated[i].item() == ref["terminated"][i]
            assert env.truncated[i].item() == ref["truncated"][i]
            ended_scores.append(float(ref["score"][i]))
            ref["score"][i] = 0
            _call(env.spec.reset_one, env, ref, i)  # a fresh start from the same stream
            np.testing.assert_array_equal(env.obs[i].numpy(), ref["obs"][i])
            for name in [*state_names, "rng"]:
                np.testing.assert_array_equal(env.arrays[name][i], ref[name][i], err_msg=name)
            assert env.arrays["ep_length"][i] == 0 and env.arrays["score"][i] == 0
            ended_returns.append(running_return[i])
            ended_lengths.append(running_length[i])
            running_return[i], running_length[i] = 0.0, 0
    assert len(ended_returns) >= 10, "random play should end some episodes"
    stats = env.stats()
    assert stats["episodes"] == len(ended_returns)
    assert stats["length"] == pytest.approx(np.mean(ended_lengths), rel=1e-12)
    assert stats["return"] == pytest.approx(np.mean(ended_returns), rel=1e-9, abs=1e-9)
    assert stats["score"] == pytest.approx(np.mean(ended_scores), rel=1e-9, abs=1e-9)
    assert env.stats() == {}


def _trajectory(env, actions):
    out = []
    for a in actions:
        obs, rewards, terminated, truncated = env.step(a)
        out.append((obs.clone(), rewards.clone(), terminated.clone(), truncated.clone()))
    return out


@pytest.mark.parametrize("game", GAMES)
def test_determinism(game):
    a = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    b = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    c = fasttrain.make(game, num_envs=8, backend="cpu", seed=6)
    assert torch.equal(a.obs, b.obs)
    assert not torch.equal(a.obs, c.obs)
    actions = _random_actions(a, 200, seed=7)
    first, second, other = _trajectory(a, actions), _trajectory(b, actions), _trajectory(c, actions)
    for x, y in zip(first, second, strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    assert any(not torch.equal(x[0], z[0]) for x, z in zip(first, other, strict=True))
    a.reset(seed=5)  # reseeding replays the same trajectory on a used env
    for x, y in zip(first, _trajectory(a, actions), strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)


@pytest.mark.parametrize("game", GAMES)
def test_state_dict_continues_bit_for_bit_and_rejects_a_misfit(game):
    a = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    actions = _random_actions(a, 120, seed=3)
    _trajectory(a, actions[:60])
    saved = a.state_dict()
    assert all(not np.shares_memory(saved[k], v) for k, v in a.arrays.items())
    b = fasttrain.make(game, num_envs=8, backend="cpu", seed=99)
    b.load_state_dict(saved)
    for x, y in zip(_trajectory(a, actions[60:]), _trajectory(b, actions[60:]), strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    before = {k: v.copy() for k, v in b.arrays.items()}
    with pytest.raises(ValueError, match="'obs' does not fit"):
        b.load_state_dict({**saved, "obs": saved["obs"][:4]})
    with pytest.raises(ValueError, match="'rng' has dtype"):
        b.load_state_dict({**saved, "rng": saved["rng"].astype(np.int32)})
    for key, value in b.arrays.items():  # nothing was written by the refused loads
        assert np.array_equal(value, before[key]), key


@pytest.mark.parametrize("game", GAMES)
def test_no_recompilation(game):
    env = fasttrain.make(game, num_envs=8, backend="cpu", seed=0)
    actions = _random_actions(env, 200, seed=1)
    env.step(actions[0])
    launchers = get_backend("cpu").compile(env.spec)  # what every cpu env of the game launches
    compiled = launchers.num_compiled()
    assert compiled >= 2  # step and reset launchers
    for a in actions[1:]:
        env.step(a)
    env.step(torch.from_numpy(actions[0]).to(torch.int32))
    storage = torch.zeros((2, 8, *env.obs_shape), dtype=env.obs_dtype)
    env.step(actions[1], obs_out=storage[1])
    env.reset(seed=3)
    again = fasttrain.make(game, num_envs=8, backend="cpu", seed=9)
    again.step(actions[2])
    bigger = fasttrain.make(game, num_envs=33, backend="cpu", seed=9)
    bigger.step()
    assert get_backend("cpu").compile(again.spec) is launchers
    assert launchers.num_compiled() == compiled


@pytest.mark.parametrize("game", GAMES)
def test_cpu_matches_python_reference_bit_for_bit(game):
    """Every buffer, final_obs where episodes ended, and the stats, after every step."""
    episodes = assert_backends_agree(games.get(game), ["python", "cpu"], 64, 10_000, seed=11)
    assert episodes > 0


@pytest.mark.parametrize("game", GAMES)
def test_parallel_cpu_matches_python_reference(game, parallel_threads):
    """Environments split over threads must not interfere (the suite otherwise runs on one)."""
    assert_backends_agree(games.get(game), ["python", "cpu"], 512, 50, seed=13)

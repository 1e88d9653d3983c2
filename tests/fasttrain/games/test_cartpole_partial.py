"""CartPole with ``observe_velocity = false``: the velocities read 0 at every step and reset,
the dynamics (and so the positions) are those of the fully observed game, every backend agrees
bit for bit, and the Gymnasium observation space bounds the velocities at 0."""

from __future__ import annotations

import numpy as np
import pytest

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree
from tests.simulator import run_on_simulator

BACKENDS = ("python", "cpu")
POSITIONS, VELOCITIES = [0, 2], [1, 3]
STATE_NAMES = ("x", "x_dot", "theta", "theta_dot", "steps")


def both(backend: str, num_envs: int = 8, seed: int = 7, **params):
    """A partially observed and a fully observed env, same seed and params otherwise."""
    partial = fasttrain.make(
        "cartpole", num_envs, backend=backend, seed=seed, observe_velocity=False, **params
    )
    full = fasttrain.make("cartpole", num_envs, backend=backend, seed=seed, **params)
    return partial, full


@pytest.mark.parametrize("backend", BACKENDS)
def test_velocities_read_zero_while_positions_and_dynamics_match_the_full_game(backend):
    # a short time limit, so truncations as well as falls restart rows during the run
    partial, full = both(backend, max_episode_steps=30)
    actions = np.random.default_rng(0).integers(0, 2, (150, partial.num_rows))
    # the reset observation already hides the velocities
    assert np.array_equal(partial.obs.numpy()[:, POSITIONS], full.obs.numpy()[:, POSITIONS])
    assert not partial.obs.numpy()[:, VELOCITIES].any()
    assert full.obs.numpy()[:, VELOCITIES].all()  # the reset draws nonzero velocities
    terminations = truncations = 0
    for t, action in enumerate(actions):
        before = {name: partial.state[name].copy() for name in ("x_dot", "theta_dot")}
        partial.step(action)
        full.step(action)
        for name in STATE_NAMES:  # the hidden state is the full game's, bit for bit
            assert np.array_equal(partial.state[name], full.state[name]), (t, name)
        for key in ("rewards", "terminated", "truncated"):
            assert np.array_equal(getattr(partial, key).numpy(), getattr(full, key).numpy())
        obs, ref = partial.obs.numpy(), full.obs.numpy()
        assert np.array_equal(obs[:, POSITIONS], ref[:, POSITIONS]), t
        # exactly +0.0: nothing of the velocity leaks, not even its sign
        assert not np.signbit(obs[:, VELOCITIES]).any() and not obs[:, VELOCITIES].any(), t
        ended = (partial.terminated | partial.truncated).numpy()
        final, ref_final = partial.final_obs.numpy()[ended], full.final_obs.numpy()[ended]
        assert np.array_equal(final[:, POSITIONS], ref_final[:, POSITIONS]), t
        assert not final[:, VELOCITIES].any(), t  # the last observation of an episode too
        # the unseen velocities still change every step (a push of 10 N), in every row
        for name, old in before.items():
            assert np.all(partial.state[name] != old), (t, name)
        terminations += int(partial.terminated.sum())
        truncations += int(partial.truncated.sum())
    assert terminations > 0 and truncations > 0  # rows restarted both ways and were checked
    assert np.abs(partial.state["x_dot"]).max() > 0.1  # moving, not just reset noise


def test_python_and_cpu_agree_bit_for_bit_without_velocities():
    spec = games.get("cartpole")
    params = spec.make_params(observe_velocity=False, max_episode_steps=40)
    episodes = assert_backends_agree(spec, ["python", "cpu"], 8, 200, seed=5, params=params)
    assert episodes > 8  # every row restarted at least once on average


SIM_SCRIPT = """
import numpy as np
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree

spec = games.get("cartpole")
params = spec.make_params(observe_velocity=False, max_episode_steps=20)
assert assert_backends_agree(spec, ["cpu", "cuda"], 4, 60, seed=3, params=params) > 0
env = fasttrain.make("cartpole", 4, backend="cuda", seed=3, observe_velocity=False)
for _ in range(5):
    env.step(torch.ones(4, dtype=torch.int64))
obs = env.obs.cpu().numpy()
assert not obs[:, [1, 3]].any() and obs[:, [0, 2]].all(), obs
print("SIMULATOR OK")
"""


def test_cuda_on_the_simulator_agrees_with_cpu_without_velocities(tmp_path):
    result = run_on_simulator(SIM_SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIMULATOR OK" in result.stdout


def test_gym_observation_space_bounds_the_hidden_velocities_at_zero():
    pytest.importorskip("gymnasium")
    from fasttrain.adapters.gym import make_vec

    partial = make_vec("cartpole", 3, seed=0, observe_velocity=False)
    full = make_vec("cartpole", 3, seed=0)
    space, full_space = partial.single_observation_space, full.single_observation_space
    assert np.array_equal(space.low[VELOCITIES], [0, 0])
    assert np.array_equal(space.high[VELOCITIES], [0, 0])
    assert np.isinf(full_space.high[VELOCITIES]).all()  # the full game is unbounded there
    assert np.array_equal(space.low[POSITIONS], full_space.low[POSITIONS])
    assert np.array_equal(space.high[POSITIONS], full_space.high[POSITIONS])
    assert partial.observation_space.shape == (3, 4)
    assert np.array_equal(partial.observation_space.high[:, VELOCITIES], np.zeros((3, 2)))
    obs, _ = partial.reset(seed=0)
    assert partial.observation_space.contains(obs)
    for _ in range(40):  # through falls and restarts
        obs, *_ = partial.step(partial.action_space.sample())
        assert partial.observation_space.contains(obs)

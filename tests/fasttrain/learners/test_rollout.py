"""The rollout storage of PPO and PQN (``learners/rollout.py``): shapes, the env writing straight
into it, its bound returns kernel, and a rollout starting where the last one ended."""

import torch

from fasttrain.config import resolve as cfg
from fasttrain.learners import rollout
from fasttrain.learners.rollout import new_rollout
from fasttrain.vecenv import make


def test_the_env_writes_into_the_storage_and_the_next_rollout_starts_where_it_ended():
    env = make("cartpole", num_envs=4, backend="cpu", seed=0)
    args = cfg.from_dict({"game": {"name": "cartpole"}}).learner
    T, N, cpu = 3, env.num_rows, torch.device("cpu")
    # the discount and trace decay of every column (a population's members: each its own)
    settings = tuple(
        torch.full((N,), value, dtype=torch.float64) for value in (args.gamma, args.gae_lambda)
    )
    storage = new_rollout(env, T, cpu, "cpu", settings, state_size=5)
    assert storage.obs.shape == (T + 1, N, *env.obs_shape)
    assert storage.final_obs.shape == (T, N, *env.obs_shape)
    assert storage.states.shape == (T + 1, N, 5) and storage.episode_starts.all()
    assert len(storage.step_outputs) == T
    held = sum(t.nbytes for t in vars(storage).values() if isinstance(t, torch.Tensor))
    assert rollout.nbytes(env, T, True, 5) == held  # the size checked before allocating
    twin = make("cartpole", num_envs=4, backend="cpu", seed=0)
    for t in range(T):
        actions = torch.zeros(N, dtype=torch.int64)
        env.step(actions, out=storage.step_outputs[t])
        twin.step(actions)
        assert torch.equal(storage.obs[t + 1], twin.obs)  # written straight into the storage
        assert torch.equal(storage.rewards[t], twin.rewards)  # and the rewards and flags
        assert torch.equal(storage.terminated[t], twin.terminated)
        assert torch.equal(storage.truncated[t], twin.truncated)
    storage.rewards.fill_(1.0)
    storage.compute_returns(cpu)  # one step from the end: reward + discounted future, no values
    assert (storage.returns[-1] == 1.0).all() and (storage.returns[0] > 1.0).all()
    feed_forward = new_rollout(env, T, cpu, "cpu", settings)
    assert feed_forward.states is None
    storage.episode_starts[-1, 0] = False
    storage.states[-1].fill_(7.0)
    nxt = new_rollout(env, T, cpu, "cpu", settings, state_size=5)
    nxt.carry_over(storage)
    assert torch.equal(nxt.obs[0], storage.obs[-1]) and torch.equal(
        nxt.states[0], storage.states[-1]
    )
    assert not nxt.episode_starts[0, 0] and nxt.episode_starts[0, 1:].all()

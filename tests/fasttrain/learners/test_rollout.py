"""PPO's rollout storage (``learners/rollout.py``): shapes, the env writing straight into it, its
bound advantage kernel, and a rollout starting where the last one ended."""

import torch

from fasttrain import config as cfg
from fasttrain.learners.rollout import new_rollout
from fasttrain.vecenv import make


def test_the_env_writes_into_the_storage_and_the_next_rollout_starts_where_it_ended():
    env = make("cartpole", num_envs=4, backend="cpu", seed=0)
    args = cfg.from_dict({"game": {"name": "cartpole"}}).learner
    args = type(args)(**{**vars(args), "num_steps": 3})
    storage = new_rollout(env, args, env.num_rows, 5, torch.device("cpu"), "cpu")
    T, N = 3, env.num_rows
    assert storage.obs.shape == (T + 1, N, *env.obs_shape)
    assert storage.final_obs.shape == (T, N, *env.obs_shape)
    assert storage.states.shape == (T + 1, N, 5) and storage.episode_starts.all()
    assert len(storage.step_outputs) == T
    twin = make("cartpole", num_envs=4, backend="cpu", seed=0)
    for t in range(T):
        actions = torch.zeros(N, dtype=torch.int64)
        env.step(actions, out=storage.step_outputs[t])
        twin.step(actions)
        assert torch.equal(storage.obs[t + 1], twin.obs)  # written straight into the storage
    storage.rewards.fill_(1.0)
    storage.gae()  # one step from the end: advantage = reward + discounted future, no values
    assert (storage.returns[-1] == 1.0).all() and (storage.returns[0] > 1.0).all()
    feed_forward = new_rollout(env, args, N, None, torch.device("cpu"), "cpu")
    assert feed_forward.states is None
    storage.episode_starts[-1, 0] = False
    storage.states[-1].fill_(7.0)
    nxt = new_rollout(env, args, N, 5, torch.device("cpu"), "cpu")
    nxt.carry_over(storage)
    assert torch.equal(nxt.obs[0], storage.obs[-1]) and torch.equal(
        nxt.states[0], storage.states[-1]
    )
    assert not nxt.episode_starts[0, 0] and nxt.episode_starts[0, 1:].all()

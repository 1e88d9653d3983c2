"""PPO's rollout storage: time-major buffers the environment writes into and the advantage
kernel reads, allocated once per run (twice with ``ppo.overlap``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fasttrain.kernels.gae import GAE


@dataclass
class Rollout:
    """One rollout's time-major storage (``T`` steps of ``N`` rows), allocated once. The env
    writes ``obs[t + 1]`` and ``final_obs[t]`` of step t straight into it (``step_outputs``),
    and the advantage kernel is bound to it (``gae``)."""

    obs: torch.Tensor  # (T + 1, N, *obs_shape): obs[0] where the rollout starts
    final_obs: torch.Tensor  # (T, N, *obs_shape): valid where step t ended an episode
    actions: torch.Tensor  # (T, N) int64
    logprobs: torch.Tensor  # (T, N): of the actions, under the policy that acted
    values: torch.Tensor  # (T, N)
    rewards: torch.Tensor  # (T, N)
    final_values: torch.Tensor  # (T, N): value of final_obs[t] where step t truncated
    advantages: torch.Tensor  # (T, N)
    returns: torch.Tensor  # (T, N)
    terminated: torch.Tensor  # (T, N) bool
    truncated: torch.Tensor  # (T, N) bool
    # episode_starts[t]: obs[t] is the first of an episode, so a recurrent state restarts
    episode_starts: torch.Tensor  # (T + 1, N) bool
    last_values: torch.Tensor  # (N,): value of obs[T], the bootstrap
    # a recurrent policy's state entering each step: states[t] goes into step t (restarted
    # inside the policy where episode_starts[t]); states[0] carries over between rollouts
    states: torch.Tensor | None = None  # (T + 1, N, state_size)
    step_outputs: list = field(default_factory=list, repr=False)
    gae: object = field(default=None, repr=False)

    def carry_over(self, other: Rollout) -> None:
        """Start where ``other`` ended: its last observation, restart flags and states."""
        self.obs[0].copy_(other.obs[-1])
        self.episode_starts[0].copy_(other.episode_starts[-1])
        if self.states is not None:
            self.states[0].copy_(other.states[-1])


def new_rollout(env, args, rows: int, state_size: int | None, device, backend: str) -> Rollout:
    """Zeroed storage for ``args.num_steps`` steps of ``rows`` rows of ``env`` on ``device``,
    its env outputs and advantage kernel (``args.gamma``, ``args.gae_lambda``) bound once;
    ``state_size``: a recurrent policy's, None for a feed-forward one."""
    dev = device
    T, N = args.num_steps, rows

    def zeros(*shape, dtype=torch.float32):
        return torch.zeros(shape, dtype=dtype, device=dev)

    storage = Rollout(
        obs=zeros(T + 1, N, *env.obs_shape, dtype=env.obs_dtype),
        final_obs=zeros(T, N, *env.obs_shape, dtype=env.obs_dtype),
        actions=zeros(T, N, dtype=torch.int64),
        logprobs=zeros(T, N),
        values=zeros(T, N),
        rewards=zeros(T, N),
        final_values=zeros(T, N),
        advantages=zeros(T, N),
        returns=zeros(T, N),
        terminated=zeros(T, N, dtype=torch.bool),
        truncated=zeros(T, N, dtype=torch.bool),
        episode_starts=torch.ones((T + 1, N), dtype=torch.bool, device=dev),
        last_values=zeros(N),
        states=None if state_size is None else zeros(T + 1, N, state_size),
    )
    storage.step_outputs = [
        env.bind_outputs(storage.obs[t + 1], storage.final_obs[t]) for t in range(T)
    ]
    gae_args = (
        storage.rewards,
        storage.values,
        storage.last_values,
        storage.final_values,
        storage.terminated,
        storage.truncated,
        args.gamma,
        args.gae_lambda,
        storage.advantages,
        storage.returns,
    )
    if backend == "cpu":  # CPU tensors as NumPy views
        gae_args = tuple(a.numpy() if isinstance(a, torch.Tensor) else a for a in gae_args)
    storage.gae = GAE.bind(backend, gae_args)
    return storage

"""One rollout's storage for PPO and PQN: time-major buffers the environment writes into and a
returns kernel reads, allocated once per run (twice with ``ppo.overlap``).

Each step slot is bound to the env once (``step_outputs``): the step writes its observations
into ``obs[t + 1]``, the final observations of ended episodes into ``final_obs[t]``, and its
rewards and flags into ``rewards[t]``, ``terminated[t]`` and ``truncated[t]``, so nothing is
copied after a step. The returns kernel (GAE for a policy, Q(lambda) for a Q-network) is bound
to the storage with a discount and a trace decay per column (a population's members, each its
own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fasttrain.kernels.gae import GAE
from fasttrain.kernels.qlambda import QLAMBDA


@dataclass
class Rollout:
    """One rollout's time-major storage (``T`` steps of ``N`` rows), allocated once."""

    obs: torch.Tensor  # (T + 1, N, *obs_shape): obs[0] where the rollout starts
    final_obs: torch.Tensor  # (T, N, *obs_shape): valid where step t ended an episode
    actions: torch.Tensor  # (T, N) int64
    rewards: torch.Tensor  # (T, N)
    terminated: torch.Tensor  # (T, N) bool
    truncated: torch.Tensor  # (T, N) bool
    # episode_starts[t]: obs[t] is the first of an episode, so a recurrent state restarts
    episode_starts: torch.Tensor  # (T + 1, N) bool
    values: torch.Tensor  # (T, N): the critic's value, or max_a Q, of obs[t] while acting
    final_values: torch.Tensor  # (T, N): value of final_obs[t] where step t truncated
    last_values: torch.Tensor  # (N,): value of obs[T], the bootstrap
    returns: torch.Tensor  # (T, N): GAE's returns, or the Q(lambda) targets
    logprobs: torch.Tensor | None = None  # (T, N): of the actions, under the acting policy
    advantages: torch.Tensor | None = None  # (T, N): a policy's only
    # a recurrent policy's state entering each step: states[t] goes into step t (restarted
    # inside the policy where episode_starts[t]); states[0] carries over between rollouts
    states: torch.Tensor | None = None  # (T + 1, N, state_size)
    step_outputs: list = field(default_factory=list, repr=False)
    kernel: object = field(default=None, repr=False)  # the bound returns kernel
    settings: tuple = field(default=(), repr=False)  # its per-column discount and decay

    def carry_over(self, other: Rollout) -> None:
        """Start where ``other`` ended: its last observation, restart flags and states."""
        self.obs[0].copy_(other.obs[-1])
        self.episode_starts[0].copy_(other.episode_starts[-1])
        if self.states is not None:
            self.states[0].copy_(other.states[-1])

    def compute_returns(self, device: torch.device) -> None:
        """The returns kernel over the whole rollout, on torch's stream on cuda (ordered with
        the learner's work, no host sync)."""
        stream = 0
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device).cuda_stream
        self.kernel(stream=stream)


def layout(env, num_steps: int, policy: bool, state_size: int | None) -> dict:
    """Every buffer's ``(shape, dtype)`` (``policy``: a policy's log-probabilities and
    advantages; ``state_size``: a recurrent policy's states)."""
    T, N, obs = num_steps, env.num_rows, tuple(env.obs_shape)
    step, flag = ((T, N), torch.float32), ((T, N), torch.bool)
    out = {
        "obs": ((T + 1, N, *obs), env.obs_dtype),
        "final_obs": ((T, N, *obs), env.obs_dtype),
        "actions": ((T, N), torch.int64),
        **dict.fromkeys(("rewards",), step),
        **dict.fromkeys(("terminated", "truncated"), flag),
        "episode_starts": ((T + 1, N), torch.bool),
        **dict.fromkeys(("values", "final_values"), step),
        "last_values": ((N,), torch.float32),
        "returns": step,
    }
    if policy:
        out.update(logprobs=step, advantages=step)
    if state_size is not None:
        out["states"] = ((T + 1, N, state_size), torch.float32)
    return out


def nbytes(env, num_steps: int, policy: bool, state_size: int | None) -> int:
    """Bytes of one rollout's storage (checked against the free memory before allocating)."""
    sizes = layout(env, num_steps, policy, state_size).values()
    return sum(math.prod(shape) * dtype.itemsize for shape, dtype in sizes)


def new_rollout(
    env, num_steps: int, device, backend: str, settings, policy=True, state_size=None
) -> Rollout:
    """Zeroed storage for ``num_steps`` steps of every row of ``env`` on ``device``, each step
    slot bound to the env, and the returns kernel (GAE where ``policy``, else Q(lambda)) bound
    for ``backend`` with ``settings``: the discount and trace decay of each column (``(N,)``,
    read as float64). ``state_size``: a recurrent policy's, None for a feed-forward one."""
    buffers = {
        name: torch.zeros(shape, dtype=dtype, device=device)
        for name, (shape, dtype) in layout(env, num_steps, policy, state_size).items()
    }
    storage = Rollout(**buffers)
    storage.episode_starts.fill_(True)
    storage.step_outputs = [
        env.bind_outputs(*(getattr(storage, k)[t + (k == "obs")] for k in BOUND))
        for t in range(num_steps)
    ]
    s = storage
    s.settings = tuple(torch.as_tensor(x, dtype=torch.float64).to(device) for x in settings)
    inputs = (s.rewards, s.values, s.last_values, s.final_values, s.terminated, s.truncated)
    outputs = (s.advantages, s.returns) if policy else (s.returns,)
    arrays = (*inputs, *s.settings, *outputs)
    if backend == "cpu":  # CPU tensors as NumPy views
        arrays = tuple(a.numpy() for a in arrays)
    s.kernel = (GAE if policy else QLAMBDA).bind(backend, arrays)
    return s


# the buffers a step writes, in ``VecEnv.bind_outputs``' order (obs one slot ahead)
BOUND = ("obs", "final_obs", "rewards", "terminated", "truncated")

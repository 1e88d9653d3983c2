"""Generalised advantage estimation as a kernel over time-major ``(T, N)`` arrays.

Traces are cut at ``terminated | truncated``. A terminated step bootstraps from 0; a truncated
step bootstraps from ``final_values`` (the value of ``final_obs``, the true next state that the
auto-reset replaced), which CleanRL's PPO omits (cleanrl #198).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange  # plain range when called from Python: `gae` itself is the reference


def gae(rewards, values, last_values, final_values, terminated, truncated, gamma, gae_lambda,
        advantages, returns):  # fmt: skip
    """Advantages and returns in place.

    Args:
        rewards, values, final_values: float32 ``(T, N)``; ``final_values`` is read only where
            ``truncated``.
        last_values: float32 ``(N,)``, value of the observation after the last step.
        terminated, truncated: bool ``(T, N)``.
        gamma, gae_lambda: discount and trace decay.
        advantages, returns: float32 ``(T, N)`` outputs.
    """
    num_steps, num_envs = rewards.shape
    for i in prange(num_envs):
        next_advantage = 0.0
        next_value = np.float64(last_values[i])
        for t in range(num_steps - 1, -1, -1):
            if terminated[t, i]:
                bootstrap, keep = 0.0, 0.0
            elif truncated[t, i]:
                bootstrap, keep = np.float64(final_values[t, i]), 0.0
            else:
                bootstrap, keep = next_value, 1.0
            value = np.float64(values[t, i])
            delta = rewards[t, i] + gamma * bootstrap - value
            next_advantage = delta + gamma * gae_lambda * keep * next_advantage
            advantages[t, i] = next_advantage
            returns[t, i] = next_advantage + value
            next_value = value


gae_cpu = numba.njit(gae, parallel=True, cache=True, error_model="numpy")

"""Generalised advantage estimation as a column kernel over time-major ``(T, N)`` arrays.

Traces are cut at ``terminated | truncated``. A terminated step bootstraps from 0; a truncated
step bootstraps from ``final_values`` (the value of ``final_obs``, the true next state that the
auto-reset replaced), which CleanRL's PPO omits (cleanrl #198). Each column has its own discount
and trace decay (float64 ``(N,)``): a solo run fills them with its one ``gamma`` and
``gae_lambda``, a population with each member's on its columns. ``gae_env`` is the per-env
scalar source; ``GAE`` runs it over environments on every backend (``columns.py``), and ``gae``
is its uncompiled reference::

    bound = GAE.bind("cpu", (rewards, values, last_values, final_values, terminated, truncated,
                             gammas, gae_lambdas, advantages, returns))
    bound(stream=0)  # advantages and returns written in place
"""

from __future__ import annotations

import numpy as np

from .columns import ColumnKernel


def gae_env(
    i,
    rewards,
    values,
    last_values,
    final_values,
    terminated,
    truncated,
    gammas,
    gae_lambdas,
    advantages,
    returns,
):
    """Advantages and returns of environment ``i``, backwards in time."""
    gamma, gae_lambda = gammas[i], gae_lambdas[i]
    next_advantage = 0.0
    next_value = np.float64(last_values[i])
    for t in range(rewards.shape[0] - 1, -1, -1):
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


GAE = ColumnKernel(gae_env, columns=lambda args: args[0].shape[1])  # one column per env of rewards


def columns(value, num_columns: int) -> np.ndarray:
    """A setting per column as the kernels read it: float64 ``(N,)``; one number fills them."""
    return np.broadcast_to(np.asarray(value, np.float64), (num_columns,)).copy()


def gae(
    rewards,
    values,
    last_values,
    final_values,
    terminated,
    truncated,
    gamma,
    gae_lambda,
    advantages,
    returns,
):
    """Advantages and returns in place, uncompiled (the reference): ``GAE`` on ``python``.

    Args:
        rewards, values, final_values: float32 ``(T, N)``; ``final_values`` is read only where
            ``truncated``.
        last_values: float32 ``(N,)``, value of the observation after the last step.
        terminated, truncated: bool ``(T, N)``.
        gamma, gae_lambda: discount and trace decay, one number or one per column.
        advantages, returns: float32 ``(T, N)`` outputs.
    """
    n = rewards.shape[1]
    settings = (columns(gamma, n), columns(gae_lambda, n))
    inputs = (rewards, values, last_values, final_values, terminated, truncated, *settings)
    GAE("python", *inputs, advantages, returns)


def example_args(num_steps: int = 2, num_envs: int = 2) -> tuple:
    """Zeroed ``GAE`` arguments of the types learners pass (float32 storage, a float64 gamma
    and lambda per column), e.g. to compile."""
    storage = [np.zeros((num_steps, num_envs), np.float32) for _ in range(5)]
    flags = [np.zeros((num_steps, num_envs), np.bool_) for _ in range(2)]
    last_values = np.zeros(num_envs, np.float32)
    rewards, values, final_values, advantages, returns = storage
    settings = (columns(0.99, num_envs), columns(0.95, num_envs))
    return (rewards, values, last_values, final_values, *flags, *settings, advantages, returns)

"""Q(lambda) returns (PQN's targets) as a column kernel over time-major ``(T, N)`` arrays.

The return of step ``t`` mixes the one-step target with the next step's return (Gallici et al.,
"Simplifying Deep Temporal Difference Learning", ICLR 2025; Peng's Q(lambda): the trace is not
cut at exploratory actions)::

    G[t] = r[t] + gamma * ((1 - lambda) * max_a Q(s[t+1], a) + lambda * G[t+1])

bootstrapped after the rollout's last step from ``last_values`` (``G[T] = max_a Q(s[T], a)``).
Traces stop at episode ends, and terminated and truncated stay apart as in ``gae.py``: a
terminated step's return is its reward alone; a truncated step's is its reward plus ``gamma``
times ``final_values``, the greedy value of ``final_obs`` (the true next state that the auto-reset
replaced). With ``lambda = 0`` these are one-step Q-learning targets, with ``lambda = 1``
discounted reward sums to the episode's end or the rollout's bootstrap. Each column has its own
discount and trace decay (float64 ``(N,)``, as ``gae.py``'s: a population's members each their
own). ``qlambda_env`` is the per-env scalar source; ``QLAMBDA`` runs it over environments on
every backend (``columns.py``) and ``qlambda`` is its uncompiled reference::

    bound = QLAMBDA.bind("cpu", (rewards, values, last_values, final_values, terminated,
                                 truncated, gammas, q_lambdas, returns))
    bound(stream=0)  # returns written in place
"""

from __future__ import annotations

import numpy as np

from .columns import ColumnKernel
from .gae import columns


def qlambda_env(
    i,
    rewards,
    values,
    last_values,
    final_values,
    terminated,
    truncated,
    gammas,
    q_lambdas,
    returns,
):
    """Q(lambda) returns of environment ``i``, backwards in time."""
    gamma, q_lambda = gammas[i], q_lambdas[i]
    next_value = np.float64(last_values[i])  # max_a Q(s[t+1], a)
    next_return = next_value  # G[t+1]; G[T] is the bootstrap value itself
    for t in range(rewards.shape[0] - 1, -1, -1):
        reward = np.float64(rewards[t, i])
        if terminated[t, i]:
            target = reward
        elif truncated[t, i]:
            target = reward + gamma * np.float64(final_values[t, i])
        else:
            target = reward + gamma * ((1.0 - q_lambda) * next_value + q_lambda * next_return)
        returns[t, i] = target
        next_return = target
        next_value = np.float64(values[t, i])


QLAMBDA = ColumnKernel(qlambda_env, columns=lambda args: args[0].shape[1])  # a column per env


def qlambda(
    rewards, values, last_values, final_values, terminated, truncated, gamma, q_lambda, returns
):
    """Q(lambda) returns in place, uncompiled (the reference): ``QLAMBDA`` on ``python``.

    Args:
        rewards: float32 ``(T, N)``.
        values: float32 ``(T, N)``, ``max_a Q(s[t], a)`` of each step's observation.
        last_values: float32 ``(N,)``, ``max_a Q`` of the observation after the last step.
        final_values: float32 ``(T, N)``, ``max_a Q`` of ``final_obs``; read only where
            ``truncated``.
        terminated, truncated: bool ``(T, N)``.
        gamma, q_lambda: discount and trace decay, one number or one per column.
        returns: float32 ``(T, N)`` output.
    """
    n = rewards.shape[1]
    settings = (columns(gamma, n), columns(q_lambda, n))
    inputs = (rewards, values, last_values, final_values, terminated, truncated, *settings)
    QLAMBDA("python", *inputs, returns)


def example_args(num_steps: int = 2, num_envs: int = 2) -> tuple:
    """Zeroed ``QLAMBDA`` arguments of the types learners pass (float32 storage, a float64
    gamma and lambda per column)."""
    rewards, values, final_values, returns = (
        np.zeros((num_steps, num_envs), np.float32) for _ in range(4)
    )
    flags = [np.zeros((num_steps, num_envs), np.bool_) for _ in range(2)]
    last_values = np.zeros(num_envs, np.float32)
    settings = (columns(0.99, num_envs), columns(0.65, num_envs))
    return (rewards, values, last_values, final_values, *flags, *settings, returns)

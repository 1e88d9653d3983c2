"""Generalised advantage estimation as a kernel over time-major ``(T, N)`` arrays.

Traces are cut at ``terminated | truncated``. A terminated step bootstraps from 0; a truncated
step bootstraps from ``final_values`` (the value of ``final_obs``, the true next state that the
auto-reset replaced), which CleanRL's PPO omits (cleanrl #198). ``gae_env`` is the per-env scalar
source; ``gae`` runs it over environments (plain Python: the reference), ``gae_cpu`` is that loop
compiled by Numba, and ``gae_cuda`` launches it one thread per environment.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange  # plain range when called from Python


def gae_env(i, rewards, values, last_values, final_values, terminated, truncated, gamma,
            gae_lambda, advantages, returns):  # fmt: skip
    """Advantages and returns of environment ``i``, backwards in time."""
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
    for i in prange(rewards.shape[1]):
        gae_env(i, rewards, values, last_values, final_values, terminated, truncated, gamma,
                gae_lambda, advantages, returns)  # fmt: skip


_gae_env_cpu = numba.njit(gae_env, inline="always", error_model="numpy")


@numba.njit(parallel=True, cache=True, error_model="numpy")
def gae_cpu(rewards, values, last_values, final_values, terminated, truncated, gamma, gae_lambda,
            advantages, returns):  # fmt: skip
    """``gae`` compiled for the CPU, parallel over environments (same arguments)."""
    for i in prange(rewards.shape[1]):
        _gae_env_cpu(i, rewards, values, last_values, final_values, terminated, truncated, gamma,
                     gae_lambda, advantages, returns)  # fmt: skip


cuda = None  # numba.cuda, imported on first use; a module global so the simulator can swap it
_gae_env_cuda = None
_gae_kernel_cuda = None


def _gae_kernel(rewards, values, last_values, final_values, terminated, truncated, gamma,
                gae_lambda, advantages, returns):  # fmt: skip
    i = cuda.grid(1)
    if i < rewards.shape[1]:
        _gae_env_cuda(i, rewards, values, last_values, final_values, terminated, truncated, gamma,
                      gae_lambda, advantages, returns)  # fmt: skip


def gae_cuda(*args, threads: int = 256, stream: int = 0):
    """``gae`` on the GPU (or Numba's simulator), one thread per environment (same arguments).

    Arrays may be CuPy arrays, torch CUDA tensors or Numba device arrays; convert them once
    with ``fasttrain.kernels.cuda.device_args`` for repeated calls. ``stream`` is a raw
    ``cudaStream_t`` (torch's ``current_stream().cuda_stream``); 0 is the default stream.
    """
    from .cuda import device_args, numba_stream

    num_envs = args[0].shape[1]
    blocks = (num_envs + threads - 1) // threads
    gae_kernel_cuda()[blocks, threads, numba_stream(stream)](*device_args(args))


def gae_kernel_cuda(jit: bool = True):
    """The GAE kernel for numba-cuda: its dispatcher, or with ``jit=False`` the Python function
    (whose device-function global is set up) for an offline ``compile_ptx``."""
    global cuda, _gae_env_cuda, _gae_kernel_cuda
    if _gae_env_cuda is None:
        from numba import cuda

        _gae_env_cuda = cuda.jit(device=True)(gae_env)
    if not jit:
        return _gae_kernel
    if _gae_kernel_cuda is None:
        _gae_kernel_cuda = cuda.jit(_gae_kernel)
    return _gae_kernel_cuda

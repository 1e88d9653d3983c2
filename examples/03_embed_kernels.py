"""Embed a fasttrain game in your own code: plain NumPy, no torch, no fasttrain learner.

`fasttrain.kernels` never imports torch. `KernelEnv` holds a game's preallocated buffers (NumPy
arrays on the CPU, CuPy arrays on a GPU) and its compiled launchers; `step()` reads
`arrays["actions"]` and writes observations, rewards and flags in place. Any DLPack consumer
(NumPy, torch, JAX, CuPy) can read those buffers without a copy.

Run:  python examples/03_embed_kernels.py [num_steps]   (or FASTTRAIN_EXAMPLE_STEPS=...)
"""

from __future__ import annotations

import os
import sys

import numpy as np

from fasttrain import games
from fasttrain.kernels import KernelEnv


def budget() -> int:
    """Steps to run: argv[1], else $FASTTRAIN_EXAMPLE_STEPS, else 1000."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FASTTRAIN_EXAMPLE_STEPS")
    return max(1, int(float(raw))) if raw else 1000


def address(array) -> int:
    """Where a NumPy array's data starts in memory."""
    return array.__array_interface__["data"][0]


def main():
    # 1. The game's spec and params come from the registry; the buffers and launchers from kernels.
    spec = games.get("snake")
    params = spec.make_params(height=8, width=8)
    env = KernelEnv(spec, num_envs=256, backend="cpu", params=params, seed=0)
    obs = env.reset(seed=0)  # a NumPy array (256, 4, 8, 8) uint8, the env's own buffer
    print(f"buffers: {', '.join(sorted(env.arrays))}")
    print(f"obs {obs.dtype} {obs.shape}, state arrays: {', '.join(env.state)}")

    # 2. A random policy in NumPy: write actions into the action buffer, launch one step.
    rng = np.random.default_rng(0)
    actions = env.arrays["actions"]
    num_steps = budget()
    total_reward = 0.0
    for _ in range(num_steps):
        actions[:] = rng.integers(0, env.num_actions, env.num_envs)
        bad = env.step()  # -1, or the index of the first out-of-range action (nothing stepped)
        assert bad == -1
        total_reward += float(env.arrays["rewards"].sum())
        # ended episodes already restarted; their last observation is in arrays["final_obs"]
    print(f"{num_steps} steps x {env.num_envs} envs, reward sum {total_reward:+.0f}")
    print(f"episode means: {env.stats()}")
    print(env.render(0))

    # 3. Zero-copy: another DLPack consumer sees the very same memory.
    view = np.from_dlpack(env.arrays["obs"])
    same = address(view) == address(env.arrays["obs"])
    print(f"np.from_dlpack(obs) shares memory: {same}")
    assert same
    try:
        import torch
    except ImportError:
        print("torch is not installed; skipping the torch view")
    else:
        tensor = torch.from_dlpack(env.arrays["rewards"])
        same = tensor.data_ptr() == address(env.arrays["rewards"])
        print(f"torch.from_dlpack(rewards) shares memory: {same}")
        assert same
        tensor[0] = 123.0  # a write through torch is a write into the kernel buffer
        assert env.arrays["rewards"][0] == 123.0
    print("zero-copy: every view reads the kernel buffers in place")


if __name__ == "__main__":
    main()

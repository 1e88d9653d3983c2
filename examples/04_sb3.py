"""Train Stable-Baselines3 PPO on fasttrain's CartPole through the SB3 adapter.

`fasttrain.adapters.sb3.make_vec_env` gives an SB3 `VecEnv` whose environments step inside one
compiled kernel launch instead of a Python loop over `gym.Env` objects. Everything else is plain
SB3: the hyperparameters below are RL-Zoo's tuned `CartPole-v1` settings.

Run:  python examples/04_sb3.py [n_timesteps]   (or FASTTRAIN_EXAMPLE_STEPS=...; RL-Zoo: 1e5)
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

from fasttrain.adapters.sb3 import make_vec_env


def linear_schedule(initial: float):
    """RL-Zoo's ``lin_<value>``: decays linearly from ``initial`` to 0 over training."""

    def schedule(progress_remaining: float) -> float:  # 1 at the start, 0 at the end
        return progress_remaining * initial

    return schedule


def budget() -> int:
    """Training steps: argv[1], else $FASTTRAIN_EXAMPLE_STEPS, else RL-Zoo's 1e5."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FASTTRAIN_EXAMPLE_STEPS")
    return int(float(raw)) if raw else 100_000


def main():
    n_timesteps = budget()
    # VecMonitor records episode returns so SB3 can log rollout/ep_rew_mean.
    venv = VecMonitor(make_vec_env("cartpole", num_envs=8, seed=0))
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear_schedule(1e-3),
        clip_range=linear_schedule(0.2),
        seed=0,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=n_timesteps)
    elapsed = time.perf_counter() - start
    returns = [episode["r"] for episode in model.ep_info_buffer]
    print(
        f"SB3 PPO on fasttrain cartpole: {model.num_timesteps:,} steps in {elapsed:.1f} s "
        f"({model.num_timesteps / elapsed:,.0f} steps/s), "
        f"training return (last {len(returns)} episodes) {np.mean(returns):.1f}"
    )
    # Greedy evaluation on fresh environments (CartPole-v1 counts as solved at 475).
    eval_env = VecMonitor(make_vec_env("cartpole", num_envs=8, seed=1))
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=16, deterministic=True)
    print(f"evaluation over 16 episodes: {mean:.1f} +/- {std:.1f}")


if __name__ == "__main__":
    main()

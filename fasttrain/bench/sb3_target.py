"""Stable-Baselines3 PPO on Gymnasium's CartPole-v1 with RL-Zoo's tuned settings, timed to a mean
return for ``fasttrain bench``. It imports stable_baselines3 at the top: import it only where
that is installed (``targets_stage`` checks first)."""

from __future__ import annotations

import math
import time

from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from fasttrain.bench.report import target_run

# rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1 (marked tuned); lr and clip_range are lin_
ZOO_CARTPOLE = dict(
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
)
ZOO_N_ENVS = 8
ZOO_N_TIMESTEPS = 100_000
ZOO_LEARNING_RATE = 1e-3
ZOO_CLIP_RANGE = 0.2


def linear(initial: float):
    """RL-Zoo's ``lin_<initial>``: ``initial`` when learn starts, falling linearly to 0 at its end
    (SB3 passes the fraction of training remaining)."""
    return lambda progress_remaining: progress_remaining * initial


class RolloutTarget(BaseCallback):
    """Training seconds until the mean return of the episodes that ended during a rollout first
    reaches ``value``; stops learning there, or once ``budget_s`` seconds have passed.

    The clock starts when the callback is made (right before ``learn``, so building the model is
    not in it) and is read after the update that follows the rollout, as fasttrain's metrics row
    is written after its iteration's update.
    """

    def __init__(self, value: float, budget_s: float):
        super().__init__()
        self.value, self.budget_s = value, budget_s
        self.returns: list[float] = []  # of the episodes that ended in the current rollout
        self.reached_at: int | None = None  # num_timesteps of the rollout that reached it
        self.seconds: float | None = None
        self.best, self.last, self.train_s = -math.inf, math.nan, 0.0
        self.stop = False
        self.start = time.perf_counter()

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:  # Monitor's record of an episode that ended at this step
                self.returns.append(float(info["episode"]["r"]))
        return not self.stop  # False ends learn (read at the first step of the next rollout)

    def _on_rollout_end(self) -> None:
        if self.returns:
            self.last = sum(self.returns) / len(self.returns)
            self.best = max(self.best, self.last)
            self.returns.clear()
            if self.reached_at is None and self.last >= self.value:
                self.reached_at = self.num_timesteps

    def _on_rollout_start(self) -> None:
        self._update_done()

    def _on_training_end(self) -> None:
        self._update_done()

    def _update_done(self) -> None:
        """The previous rollout's update is done: read the clock, decide whether to stop."""
        if self.num_timesteps == 0:
            return
        self.train_s = time.perf_counter() - self.start
        if self.reached_at is not None and self.seconds is None:
            self.seconds = self.train_s
        self.stop = self.seconds is not None or self.train_s >= self.budget_s


def sb3_time_to_target(
    value: float, seed: int, budget_s: float, n_timesteps: int = ZOO_N_TIMESTEPS
) -> dict:
    """A ``target_run`` of SB3 PPO (RL-Zoo's CartPole-v1 settings, CPU) to mean return ``value``,
    capped by ``n_timesteps`` and ``budget_s`` training seconds."""
    venv = make_vec_env("CartPole-v1", n_envs=ZOO_N_ENVS, seed=seed)  # Monitor-wrapped
    model = PPO(
        "MlpPolicy",
        venv,
        learning_rate=linear(ZOO_LEARNING_RATE),
        clip_range=linear(ZOO_CLIP_RANGE),
        seed=seed,
        device="cpu",
        verbose=0,
        **ZOO_CARTPOLE,
    )
    callback = RolloutTarget(value, budget_s)
    try:
        model.learn(n_timesteps, callback=callback)
    finally:
        venv.close()
    if callback.seconds is not None:
        ended = "target"
    elif callback.train_s >= budget_s:
        ended = "budget"
    else:
        ended = "total_timesteps"
    return target_run(
        seed,
        callback.seconds,
        callback.reached_at,
        callback.best,
        callback.last,
        callback.train_s,
        model.num_timesteps,
        ended,
    )

"""Tuned per-game learner settings: the built-in ``[game.<name>.<learner>]`` values.

They sit just above the learners' dataclass defaults; a user's ``--config`` file and ``--set``
beat them (see ``fasttrain.config``). Each entry says what it was tuned to reach.
"""

from __future__ import annotations

GAME_DEFAULTS: dict[str, dict[str, dict]] = {
    # 12x12 Snake on 2 CPU cores: mean score ~26 after 20M steps in ~4 minutes
    "snake": {
        "ppo": {"total_timesteps": 20_000_000, "num_envs": 1024, "num_steps": 32},
        # mean score ~8 after 5M steps (~5 minutes): 4 sampled transitions per env transition;
        # fewer updates run 100-260k SPS on 2 cores but barely learn
        "dqn": {
            "total_timesteps": 5_000_000,
            "num_envs": 64,
            "num_steps": 32,
            "train_frequency": 1,
            "n_step": 3,
            "double_q": True,
            "learning_rate": 5e-4,
            "exploration_fraction": 0.2,
        },
    },
    "cartpole": {
        # mean return 500 (the maximum) after ~400k steps, ~10 s on 2 CPU cores
        "ppo": {
            "total_timesteps": 500_000,
            "num_envs": 64,
            "num_steps": 32,
            "num_minibatches": 4,
            "update_epochs": 4,
            "learning_rate": 2.5e-3,
            "ent_coef": 0.0,
        },
        # passes tests/fasttrain/test_dqn.py's learning test
        "dqn": {
            "num_envs": 16,
            "num_steps": 32,
            "buffer_size": 20_000,
            "train_frequency": 1,
            "batch_size": 128,
            "target_network_frequency": 500,
            "n_step": 3,
            "double_q": True,
        },
    },
}


def preset(game: str, learner: str) -> dict:
    """The tuned settings of ``learner`` on ``game`` (empty when there are none)."""
    return GAME_DEFAULTS.get(game, {}).get(learner, {})

"""DQN's settings: checked in one line, torch-free."""

import pytest

from fasttrain.config import resolve as cfg
from fasttrain.learners.dqn_config import DQNConfig, validate


@pytest.mark.parametrize(
    "dqn, words",
    [
        ({"num_steps": 6, "train_frequency": 4}, ["dqn.num_steps = 6", "train_frequency = 4"]),
        ({"buffer_size": 8, "num_envs": 4, "n_step": 3}, ["dqn.buffer_size = 8", ">= 12"]),
        ({"learning_starts": 1000, "total_timesteps": 1000}, ["learning_starts", "no update"]),
        ({"tau": 0.0}, ["dqn.tau must be in (0, 1]"]),
        ({"end_e": 1.5}, ["dqn.end_e must be in [0, 1]"]),
        ({"n_step": 0}, ["dqn.n_step must be >= 1"]),
        ({"loss": "l1"}, ["huber, mse"]),
    ],
)
def test_bad_dqn_config_fails_with_one_clear_line(dqn, words):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict({"run": {"algo": "dqn"}, "game": {"snake": {"dqn": dqn}}})
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_the_defaults_pass_and_where_names_the_section():
    validate(DQNConfig())
    with pytest.raises(cfg.ConfigError, match=r"^game.snake.dqn.gamma must be in \[0, 1\]"):
        validate(DQNConfig(gamma=2.0), "game.snake.dqn")

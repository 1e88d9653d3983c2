"""PQN's settings: checked in one line, torch-free."""

import pytest

from fasttrain.config import resolve as cfg
from fasttrain.learners.pqn_config import PQNConfig, validate


def test_bad_settings_end_in_one_line():
    cases = [
        ({"num_minibatches": 5}, "does not split into pqn.num_minibatches = 5"),
        ({"q_lambda": 1.5}, "pqn.q_lambda must be in [0, 1]"),
        ({"exploration_fraction": -0.1}, "pqn.exploration_fraction must be in [0, 1]"),
        ({"learning_rate": 0.0}, "pqn.learning_rate must be > 0"),
        ({"optimizer": "sgd"}, "must be one of adam, muon"),
    ]
    for values, words in cases:
        with pytest.raises(cfg.ConfigError) as info:
            cfg.from_dict({"pqn": values})
        assert "\n" not in str(info.value) and words in str(info.value), info.value
    with pytest.raises(cfg.ConfigError, match="needs a learner with recurrent policies"):
        cfg.from_dict({"run": {"algo": "pqn"}, "model": {"core": "lstm"}})


def test_the_defaults_pass_and_where_names_the_section():
    validate(PQNConfig())
    with pytest.raises(cfg.ConfigError, match=r"^game.cartpole.pqn.num_envs must be >= 1, got 0"):
        validate(PQNConfig(num_envs=0), "game.cartpole.pqn")

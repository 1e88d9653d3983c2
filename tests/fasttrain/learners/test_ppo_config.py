"""PPO's settings: checked in one line, torch-free."""

import pytest

from fasttrain.config.sections import ModelConfig
from fasttrain.errors import ConfigError
from fasttrain.learners.ppo_config import PPOConfig, check_model, validate


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"num_envs": 0}, "ppo.num_envs must be >= 1, got 0"),
        ({"num_envs": 6, "num_steps": 1, "num_minibatches": 4}, "ppo: batch num_envs*num_steps"),
        ({"gae_lambda": 1.5}, "ppo.gae_lambda must be in [0, 1], got 1.5"),
        ({"learning_rate": 11.0}, "ppo.learning_rate must be in (0, 10], got 11.0"),
        ({"max_minibatch_size": 3}, "ppo: minibatches of 4096 samples"),
        ({"ent_coef": -0.1}, "ppo.ent_coef must be >= 0, got -0.1"),
        ({"optimizer": "sgd"}, "unknown ppo.optimizer 'sgd'; valid: adam, muon"),
    ],
)
def test_bad_ppo_settings_end_in_one_line(values, words):
    with pytest.raises(ConfigError) as info:
        validate(PPOConfig(**values))
    assert str(info.value).startswith(words) and "\n" not in str(info.value), info.value


def test_a_recurrent_core_needs_whole_sequences_per_minibatch():
    lstm = ModelConfig(core="lstm")
    check_model(PPOConfig(num_steps=32, bptt_horizon=16), lstm)
    check_model(PPOConfig(num_steps=30, bptt_horizon=16), ModelConfig())  # feed-forward: any
    with pytest.raises(ConfigError, match="does not split into sequences of ppo.bptt_horizon"):
        check_model(PPOConfig(num_steps=30, bptt_horizon=16), lstm)
    with pytest.raises(ConfigError, match="do not split into ppo.num_minibatches = 3"):
        check_model(PPOConfig(num_envs=4, num_steps=32, num_minibatches=3), lstm)
    with pytest.raises(ConfigError, match="must hold a whole number"):
        check_model(PPOConfig(num_envs=8, num_steps=32, max_minibatch_size=8), lstm)

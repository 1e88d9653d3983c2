"""ppo.max_minibatch_size: chunks of a minibatch accumulate gradients before one optimizer
step, with the result of the whole minibatch (feed-forward and recurrent policies)."""

import pytest
import torch

from fasttrain import config as cfg
from fasttrain.errors import ConfigError
from fasttrain.learners.ppo import Trainer


def snake(**ppo):
    return cfg.from_dict(
        {
            "run": {"amp": "off"},
            "game": {
                "snake": {
                    "height": 6,
                    "width": 6,
                    "ppo": {
                        "num_envs": 16,
                        "num_steps": 8,
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "total_timesteps": 512,
                        **ppo,
                    },
                }
            },
            "model": {"hidden": 32},
        }
    )


def recurrent(**ppo):
    return cfg.from_dict(
        {
            "run": {"amp": "off"},
            "game": {
                "name": "cartpole",
                "cartpole": {
                    "ppo": {
                        "num_envs": 8,
                        "num_steps": 16,
                        "bptt_horizon": 4,
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "total_timesteps": 256,
                        **ppo,
                    }
                },
            },
            "model": {"hidden": 16, "core": "gru", "core_size": 8},
        }
    )


def trained(config):
    trainer = Trainer(config, warn=lambda *_: None)
    losses = [trainer.iterate() for _ in range(2)]
    return trainer, losses


@pytest.mark.parametrize("make,chunk", [(snake, 16), (snake, 32), (recurrent, 8), (recurrent, 16)])
def test_chunks_equal_one_large_minibatch(make, chunk):
    whole, whole_losses = trained(make())
    split, split_losses = trained(make(max_minibatch_size=chunk))
    assert split.chunk is not None and whole.chunk is None
    assert whole.global_step == split.global_step
    for name, a in whole.policy.state_dict().items():
        b = split.policy.state_dict()[name]
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
    initial = Trainer(make(), warn=print).policy.state_dict()  # same seed: same start
    moved = sum(float((initial[k] - v).abs().sum()) for k, v in whole.policy.state_dict().items())
    assert moved > 0  # the updates did change the weights
    for a, b in zip(whole_losses, split_losses, strict=True):
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-6), key


def test_a_chunk_as_large_as_the_minibatch_changes_nothing():
    trainer = Trainer(snake(max_minibatch_size=64), warn=lambda *_: None)
    assert trainer.chunk is None  # minibatch = 16 * 8 / 2 = 64 samples


@pytest.mark.parametrize(
    "make,value,words",
    [
        (snake, 24, "do not split into chunks"),
        (snake, -1, "must be >= 0"),
        (recurrent, 6, "do not split into chunks"),
        (recurrent, 2, "whole number"),
    ],
)
def test_bad_sizes_are_refused_in_one_line(make, value, words):
    with pytest.raises(ConfigError, match=words):
        cfg.validate(make(max_minibatch_size=value))

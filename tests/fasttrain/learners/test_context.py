"""The run context (``learners/context.py``): the autocast run.amp picks, and threads sized for
the run (one per core, one for small steps, networks initialised on one thread)."""

import pytest
import torch

from fasttrain import device as devices
from fasttrain.config import resolve as cfg
from fasttrain.learners import context
from fasttrain.learners.ppo import Trainer
from tests.conftest import small_snake as small


def test_amp_auto_sets_the_trainers_autocast(monkeypatch):
    cases = (
        ({"avx512_bf16"}, 128, torch.bfloat16),
        ({"avx512_bf16"}, 16, None),
        (set(), 128, None),
    )
    for flags, hidden, dtype in cases:
        monkeypatch.setattr(devices, "cpu_flags", lambda flags=flags: set(flags))
        config = small(run={"amp": "auto"}, model={"hidden": hidden})
        trainer = Trainer(config, warn=lambda *_: None)
        assert trainer.ctx.amp_dtype is dtype, (flags, hidden)
    with pytest.raises(cfg.ConfigError, match="auto, off, bf16, fp16"):
        small(run={"amp": "bfloat16"})
    with pytest.raises(cfg.ConfigError, match="needs device cuda"):
        Trainer(small(run={"amp": "fp16"}), warn=lambda *_: None)


def test_setup_threads_takes_one_thread_for_small_steps_where_the_config_says_0(four_cores):
    import numba

    auto, two = cfg.RunConfig(), cfg.RunConfig(torch_threads=2, numba_threads=2)
    below, at = context.SMALL_STEP_WORK - 1, context.SMALL_STEP_WORK
    for settings, work, expected in (
        (auto, at, (4, four_cores)),  # one per core
        (auto, None, (4, four_cores)),  # size unknown yet
        (auto, below, (1, 1)),
        (two, below, (2, min(2, four_cores))),  # a count in the config is kept
    ):
        context.setup_threads(settings, 1, work)
        assert (torch.get_num_threads(), numba.get_num_threads()) == expected, (settings, work)
    context.setup_threads(auto, 2, at)  # two ranks on the machine share its cores
    assert torch.get_num_threads() == 2


def test_initial_weights_do_not_depend_on_the_thread_count():
    """Networks are initialised on one thread, so runs that differ only in threads start alike
    (orthogonal initialisation rounds differently on two threads)."""
    weights = []
    for threads in (1, 2):
        config = small(run={"torch_threads": threads}, model={"hidden": 64})
        trainer = Trainer(config, warn=lambda *_: None)
        weights.append([p.detach().clone() for p in trainer.policy.parameters()])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)

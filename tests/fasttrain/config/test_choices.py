"""The string settings' valid values, torch-free, and the one optimizer check."""

import pytest

from fasttrain.config import choices
from fasttrain.errors import ConfigError


def test_the_modules_that_act_on_a_setting_use_these_lists():
    from fasttrain import device, models

    assert device.DEVICES is choices.DEVICES and device.AMP_MODES is choices.AMP_MODES
    assert device.COMPILE_MODES is choices.COMPILE_MODES
    assert models.CORES is choices.CORES and models.MODEL_KINDS is choices.MODEL_KINDS


def test_an_unknown_optimizer_is_refused_in_one_line():
    choices.check_optimizer("adam", "ppo")
    with pytest.raises(ConfigError, match=r"^unknown ppo.optimizer 'sgd'; valid: adam, muon$"):
        choices.check_optimizer("sgd", "ppo")


def test_muon_is_refused_only_where_torch_lacks_it():
    import torch

    if hasattr(torch.optim, "Muon"):
        choices.check_optimizer("muon", "dqn")
    else:
        with pytest.raises(ConfigError, match=r"dqn.optimizer = 'muon' needs torch >= 2.9"):
            choices.check_optimizer("muon", "dqn")

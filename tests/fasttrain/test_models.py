"""fasttrain.models: the observation encoder, the torsos the ``[model]`` config picks, the
actor-critic and the Q-network (``tests/fasttrain/test_recurrent.py`` checks the recurrent core
against ``nn.LSTMCell`` / ``nn.GRUCell``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.models import (
    TRAINING_COPIES,
    ObsEncoder,
    make_policy,
    make_q_network,
    make_torso,
    torso_numel,
    training_nbytes,
)


def test_uint8_encoder_is_log1p_of_every_byte_and_leaves_its_input_alone():
    from fasttrain.models import ObsEncoder

    grid = torch.arange(256, dtype=torch.uint8).view(4, 8, 8)
    encoded = ObsEncoder(uint8_input=True)(grid)
    assert encoded.dtype == torch.float32
    torch.testing.assert_close(encoded, torch.log1p(grid.float()))
    assert torch.equal(grid, torch.arange(256, dtype=torch.uint8).view(4, 8, 8))
    floats = grid.float()  # an already float input (as play may pass) is not written to
    torch.testing.assert_close(ObsEncoder(uint8_input=True)(floats), torch.log1p(grid.float()))
    assert torch.equal(floats, grid.float())
    # under autograd too (the update's forward)
    weight = torch.ones(256, requires_grad=True)
    (ObsEncoder(uint8_input=True)(grid).view(-1) * weight).sum().backward()
    torch.testing.assert_close(weight.grad, torch.log1p(torch.arange(256.0)))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_cnn_torso_has_model_layers_convolutions(layers):
    """``model.layers`` counts the CNN's 3x3 convolutions (they keep the grid's size) as it
    counts the MLP's hidden layers."""
    model = cfg.ModelConfig(kind="cnn", layers=layers, channels=8, hidden=32)
    policy = make_policy((4, 10, 10), torch.uint8, 6, model)
    convs = [m for m in policy.torso if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == layers and convs[0].in_channels == 4
    assert policy.torso[-2].in_features == 8 * 10 * 10
    logits, values, _ = policy(torch.zeros(3, 4, 10, 10, dtype=torch.uint8))
    assert logits.shape == (3, 6) and values.shape == (3,)


def test_uint8_grids_are_encoded_as_log_1_plus_x_in_a_copy():
    obs = torch.tensor([[0, 1, 3, 255]], dtype=torch.uint8)
    x = ObsEncoder(uint8_input=True)(obs)
    assert x.dtype == torch.float32
    assert torch.equal(x, torch.log(torch.tensor([[1.0, 2.0, 4.0, 256.0]])))
    floats = torch.tensor([[0.5, -2.0]])
    assert torch.equal(ObsEncoder(uint8_input=False)(floats), floats)


def test_category_codes_are_one_hot_last_or_as_channels_first():
    codes = torch.tensor([[[0, 2], [1, 0]]])  # (B=1, H=2, W=2), 3 categories
    last = ObsEncoder(False, categories=3)(codes)
    assert last.shape == (1, 2, 2, 3) and last[0, 0, 1].tolist() == [0.0, 0.0, 1.0]
    first = ObsEncoder(False, categories=3, channels_first=True)(codes)
    assert first.shape == (1, 3, 2, 2) and torch.equal(first, last.movedim(-1, 1))


def test_auto_is_the_cnn_for_grids_on_a_gpu_and_the_mlp_elsewhere():
    auto = cfg.ModelConfig(kind="auto", hidden=16, channels=4)
    convs = lambda torso: [m for m in torso if isinstance(m, torch.nn.Conv2d)]  # noqa: E731
    with torch.device("meta"):
        assert convs(make_torso((4, 6, 6), auto, "cuda")) != []
        assert convs(make_torso((6, 6), auto, "cuda", categories=3)) != []  # codes: a grid too
        assert convs(make_torso((4, 6, 6), auto, "cpu")) == []
        assert convs(make_torso((4,), auto, "cuda")) == []
    with pytest.raises(ValueError, match=r"model.kind='cnn' needs \(C, H, W\) observations"):
        make_torso((4,), cfg.ModelConfig(kind="cnn"))


def test_the_mlp_has_model_layers_hidden_layers_of_its_activation():
    model = cfg.ModelConfig(kind="mlp", layers=3, hidden=16, activation="relu")
    torso = make_torso((2, 5), model)
    linears = [m for m in torso if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 16), (16, 16), (16, 16)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in torso) == 3
    normed = make_torso((2, 5), model, layer_norm=True)
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in normed) == 3


def test_training_bytes_are_four_float32_copies_of_the_torsos_weights():
    model = cfg.ModelConfig(kind="mlp", layers=2, hidden=16)
    weights = (10 * 16 + 16) + (16 * 16 + 16)
    assert training_nbytes((10,), model) == TRAINING_COPIES * 4 * weights


@pytest.mark.parametrize(
    ("obs_shape", "kind", "categories", "layer_norm"),
    [
        ((10,), "mlp", 0, False),
        ((2, 5), "mlp", 3, True),
        ((4, 6, 6), "cnn", 0, False),
        ((5, 5), "cnn", 4, True),
        ((10, 10), "cnn", 7, False),
    ],
)
@pytest.mark.parametrize("layers", [1, 3])
def test_the_torso_count_by_arithmetic_is_the_built_networks(
    obs_shape, kind, categories, layer_norm, layers
):
    model = cfg.ModelConfig(kind=kind, layers=layers, hidden=12, channels=5)
    built = make_torso(obs_shape, model, categories=categories, layer_norm=layer_norm)
    count = torso_numel(obs_shape, model, categories=categories, layer_norm=layer_norm)
    assert count == sum(p.numel() for p in built.parameters())


def test_a_claimed_huge_network_is_counted_without_building_it():
    model = cfg.ModelConfig(kind="mlp", layers=100_000, hidden=16)
    assert torso_numel((4,), model) == (4 * 16 + 16) + 99_999 * (16 * 16 + 16)


def test_the_actor_critic_gives_logits_and_values_per_row():
    policy = make_policy((4,), torch.float32, 3, cfg.ModelConfig(hidden=8))
    assert policy.initial_state(5) is None
    logits, values, state = policy(torch.zeros(5, 4))
    assert logits.shape == (5, 3) and values.shape == (5,) and state is None
    assert torch.equal(policy.value(torch.zeros(5, 4)), values)


def test_the_dueling_q_network_centres_the_advantages_on_the_value():
    model = cfg.ModelConfig(hidden=8)
    torch.manual_seed(0)
    plain = make_q_network((4,), np.float32, 3, model)
    assert plain(torch.zeros(2, 4)).shape == (2, 3)
    dueling = make_q_network((4,), np.float32, 3, model, dueling=True)
    obs = torch.randn(2, 4)
    with torch.no_grad():
        hidden = dueling.torso(dueling.encoder(obs))
        advantages = dueling.head(hidden)
        expected = dueling.value_head(hidden) + advantages - advantages.mean(1, keepdim=True)
        q = dueling(obs)
    assert torch.allclose(q, expected)
    assert torch.allclose(q.mean(1), dueling.value_head(hidden)[:, 0], atol=1e-6)

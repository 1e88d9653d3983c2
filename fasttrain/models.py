"""Actor-critic and Q-networks on an MLP (vectors) or a small CNN (grids), orthogonal init.

Policies share one interface, ready for memory: ``initial_state(n)`` gives the state of ``n``
fresh rows and ``forward(obs, state, episode_starts)`` returns ``(logits, values, state)``.
Feed-forward policies carry ``None`` as their state; a recurrent core zeroes a row's state
exactly where ``episode_starts`` is true.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MODEL_KINDS = ("auto", "mlp", "cnn")


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias (CleanRL's initialisation)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class ObsEncoder(nn.Module):
    """Observations as floats: category codes one-hot (as channels first for a CNN), uint8
    grids through log1p (they hold flags and small counts; log1p puts both on one scale)."""

    def __init__(self, uint8_input: bool, categories: int = 0, channels_first: bool = False):
        super().__init__()
        self.uint8_input = uint8_input
        self.categories = categories
        self.channels_first = channels_first

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.categories:
            x = F.one_hot(obs.long(), self.categories).float()  # (B, *obs_shape, categories)
            return x.movedim(-1, 1) if self.channels_first else x
        return torch.log1p(obs.float()) if self.uint8_input else obs.float()


class ActorCritic(nn.Module):
    """A shared torso with a policy head (logits) and a value head."""

    def __init__(self, torso: nn.Module, torso_dim: int, num_actions: int, encoder: ObsEncoder):
        super().__init__()
        self.encoder = encoder
        self.torso = torso
        self.actor = layer_init(nn.Linear(torso_dim, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(torso_dim, 1), std=1.0)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.torso(self.encoder(obs))

    is_recurrent = False  # feed-forward: no state between steps

    def initial_state(self, num_rows: int):
        """The state of ``num_rows`` fresh rows: ``None`` for a feed-forward policy."""
        return None

    def forward(self, obs: torch.Tensor, state=None, episode_starts=None):
        """Logits ``(B, num_actions)``, values ``(B,)`` and the next state (``state`` as given)."""
        hidden = self.features(obs)
        return self.actor(hidden), self.critic(hidden).squeeze(-1), state

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)


class QNetwork(nn.Module):
    """Q-values ``(B, num_actions)`` from a torso; ``dueling`` splits value and advantage heads."""

    def __init__(
        self,
        torso: nn.Module,
        torso_dim: int,
        num_actions: int,
        encoder: ObsEncoder,
        dueling: bool = False,
    ):
        super().__init__()
        self.encoder = encoder
        self.torso = torso
        self.head = layer_init(nn.Linear(torso_dim, num_actions), std=1.0)
        self.value_head = layer_init(nn.Linear(torso_dim, 1), std=1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hidden = self.torso(self.encoder(obs))
        q = self.head(hidden)
        if self.value_head is None:
            return q
        return self.value_head(hidden) + q - q.mean(dim=1, keepdim=True)


def _kind(obs_shape, model, device, categories: int) -> str:
    """``model.kind`` with ``auto`` resolved: the CNN for grids ((C, H, W), or (H, W) of
    category codes) on a GPU, the MLP otherwise: on a CPU the CNN costs 5-10x more per sample
    than the MLP and learns less per second."""
    grid = len(obs_shape) == 3 or (categories > 0 and len(obs_shape) == 2)
    if model.kind == "auto":
        return "cnn" if grid and torch.device(device).type == "cuda" else "mlp"
    if model.kind == "cnn" and not grid:
        raise ValueError(f"model.kind='cnn' needs (C, H, W) observations, got {obs_shape}")
    return model.kind


def _encoder(obs_shape, obs_dtype, model, device, categories: int) -> ObsEncoder:
    uint8_input = obs_dtype in (torch.uint8, np.uint8)
    cnn = _kind(obs_shape, model, device, categories) == "cnn"
    return ObsEncoder(uint8_input, categories, channels_first=cnn)


def make_torso(obs_shape, model, device="cpu", categories: int = 0) -> nn.Module:
    """The shared body chosen by the ``[model]`` config: an MLP or a small CNN; ``categories``
    > 0 means observations are codes the encoder one-hots first."""
    kind = _kind(obs_shape, model, device, categories)
    if categories:  # the one-hot adds a channel axis (first, for the CNN) or a last axis
        obs_shape = (categories, *obs_shape) if kind == "cnn" else (*obs_shape, categories)
    if kind == "cnn":
        channels, height, width = obs_shape
        c = model.channels
        return nn.Sequential(
            layer_init(nn.Conv2d(channels, c, 3, padding=1)),
            nn.ReLU(),
            layer_init(nn.Conv2d(c, c, 3, padding=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(c * height * width, model.hidden)),
            nn.ReLU(),
        )
    if kind == "mlp":
        size = int(np.prod(obs_shape))
        layers: list[nn.Module] = [nn.Flatten()]
        for k in range(model.layers):
            layers += [
                layer_init(nn.Linear(size if k == 0 else model.hidden, model.hidden)),
                nn.Tanh() if model.activation == "tanh" else nn.ReLU(),
            ]
        return nn.Sequential(*layers)
    raise ValueError(f"unknown model.kind {kind!r}; valid: {', '.join(MODEL_KINDS)}")


def make_policy(
    obs_shape, obs_dtype, num_actions: int, model, device="cpu", obs_categories: int = 0
) -> ActorCritic:
    """The actor-critic of the ``[model]`` config (see ``make_torso``)."""
    encoder = _encoder(obs_shape, obs_dtype, model, device, obs_categories)
    torso = make_torso(obs_shape, model, device, obs_categories)
    return ActorCritic(torso, model.hidden, num_actions, encoder).to(device)


def make_q_network(
    obs_shape,
    obs_dtype,
    num_actions: int,
    model,
    device="cpu",
    dueling: bool = False,
    obs_categories: int = 0,
) -> QNetwork:
    """The Q-network of the ``[model]`` config (see ``make_torso``)."""
    encoder = _encoder(obs_shape, obs_dtype, model, device, obs_categories)
    torso = make_torso(obs_shape, model, device, obs_categories)
    return QNetwork(torso, model.hidden, num_actions, encoder, dueling).to(device)

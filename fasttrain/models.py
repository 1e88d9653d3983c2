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
from torch import nn

MODEL_KINDS = ("auto", "mlp", "cnn")


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias (CleanRL's initialisation)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class ActorCritic(nn.Module):
    """A shared torso with a policy head (logits) and a value head."""

    def __init__(self, torso: nn.Module, torso_dim: int, num_actions: int, uint8_input: bool):
        super().__init__()
        self.torso = torso
        self.actor = layer_init(nn.Linear(torso_dim, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(torso_dim, 1), std=1.0)
        self.uint8_input = uint8_input

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        # uint8 grids hold flags (0/1) and small counts; log1p puts both on one scale
        x = torch.log1p(obs.float()) if self.uint8_input else obs.float()
        return self.torso(x)

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
        uint8_input: bool,
        dueling: bool = False,
    ):
        super().__init__()
        self.torso = torso
        self.head = layer_init(nn.Linear(torso_dim, num_actions), std=1.0)
        self.value_head = layer_init(nn.Linear(torso_dim, 1), std=1.0) if dueling else None
        self.uint8_input = uint8_input

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = torch.log1p(obs.float()) if self.uint8_input else obs.float()
        hidden = self.torso(x)
        q = self.head(hidden)
        if self.value_head is None:
            return q
        return self.value_head(hidden) + q - q.mean(dim=1, keepdim=True)


def make_torso(obs_shape, model, device="cpu") -> nn.Module:
    """The shared body chosen by the ``[model]`` config: an MLP or a small CNN.

    ``kind = "auto"`` picks the CNN for (C, H, W) observations on a GPU and the MLP otherwise:
    on a CPU the CNN costs 5-10x more per sample than the MLP and learns less per second.
    """
    kind = model.kind
    if kind == "auto":
        kind = "cnn" if len(obs_shape) == 3 and torch.device(device).type == "cuda" else "mlp"
    if kind == "cnn":
        if len(obs_shape) != 3:
            raise ValueError(f"model.kind='cnn' needs (C, H, W) observations, got {obs_shape}")
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


def make_policy(obs_shape, obs_dtype, num_actions: int, model, device="cpu") -> ActorCritic:
    """The actor-critic of the ``[model]`` config (see ``make_torso``)."""
    uint8_input = obs_dtype in (torch.uint8, np.uint8)
    torso = make_torso(obs_shape, model, device)
    return ActorCritic(torso, model.hidden, num_actions, uint8_input).to(device)


def make_q_network(
    obs_shape, obs_dtype, num_actions: int, model, device="cpu", dueling: bool = False
) -> QNetwork:
    """The Q-network of the ``[model]`` config (see ``make_torso``)."""
    uint8_input = obs_dtype in (torch.uint8, np.uint8)
    torso = make_torso(obs_shape, model, device)
    return QNetwork(torso, model.hidden, num_actions, uint8_input, dueling).to(device)

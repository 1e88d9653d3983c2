"""Actor-critic networks: an MLP for vectors and a small CNN for grids, orthogonally initialised."""

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

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(B, num_actions)`` and values ``(B,)``."""
        hidden = self.features(obs)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)


def make_policy(obs_shape, obs_dtype, num_actions: int, model, device="cpu") -> ActorCritic:
    """Build the network chosen by the ``[model]`` config.

    ``kind = "auto"`` picks the CNN for (C, H, W) observations on a GPU and the MLP otherwise:
    on a CPU the CNN costs 5-10x more per sample than the MLP and learns less per second.
    """
    kind = model.kind
    if kind == "auto":
        kind = "cnn" if len(obs_shape) == 3 and torch.device(device).type == "cuda" else "mlp"
    uint8_input = obs_dtype in (torch.uint8, np.uint8)
    if kind == "cnn":
        if len(obs_shape) != 3:
            raise ValueError(f"model.kind='cnn' needs (C, H, W) observations, got {obs_shape}")
        channels, height, width = obs_shape
        c = model.channels
        torso = nn.Sequential(
            layer_init(nn.Conv2d(channels, c, 3, padding=1)),
            nn.ReLU(),
            layer_init(nn.Conv2d(c, c, 3, padding=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(c * height * width, model.hidden)),
            nn.ReLU(),
        )
    elif kind == "mlp":
        size = int(np.prod(obs_shape))
        layers: list[nn.Module] = [nn.Flatten()]
        for k in range(model.layers):
            layers += [layer_init(nn.Linear(size if k == 0 else model.hidden, model.hidden)),
                       nn.Tanh() if model.activation == "tanh" else nn.ReLU()]
        torso = nn.Sequential(*layers)
    else:
        raise ValueError(f"unknown model.kind {kind!r}; valid: {', '.join(MODEL_KINDS)}")
    return ActorCritic(torso, model.hidden, num_actions, uint8_input).to(device)

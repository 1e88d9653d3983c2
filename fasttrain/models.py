"""Actor-critic and Q-networks on an MLP (vectors) or a small CNN (grids), orthogonal init.

Policies share one interface: ``initial_state(n)`` gives the state of ``n`` fresh rows and
``forward(obs, state, episode_starts)`` returns ``(logits, values, state)``. Feed-forward policies
carry ``None`` as their state. A recurrent core (``[model] core = "lstm" | "gru"``) sits between
the torso and the heads; its state is one float tensor per row (an LSTM's ``h`` and ``c`` side by
side) and is zeroed exactly where ``episode_starts`` is true, before the step that reads it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fasttrain import recurrent
from fasttrain.config.choices import CORES, MODEL_KINDS


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias (CleanRL's initialisation)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class ObsEncoder(nn.Module):
    """Observations as floats: category codes one-hot (as channels first for a CNN), uint8
    grids through log(1 + x) (they hold flags and small counts; the log puts both on one
    scale)."""

    def __init__(self, uint8_input: bool, categories: int = 0, channels_first: bool = False):
        super().__init__()
        self.uint8_input = uint8_input
        self.categories = categories
        self.channels_first = channels_first

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.categories:
            x = F.one_hot(obs.long(), self.categories).float()  # (B, *obs_shape, categories)
            return x.movedim(-1, 1) if self.channels_first else x
        if self.uint8_input:
            # log(1 + x), not log1p: the same values on every byte (1 + x is exact in float32)
            # at ~1/3 of log1p's time on the CPU, where log1p is not vectorised as well
            return obs.to(torch.float32, copy=True).add_(1.0).log_()  # never the caller's
        return obs.float()


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

    def value(self, obs: torch.Tensor, state=None) -> torch.Tensor:
        """Values ``(B,)`` of ``obs`` (seen from ``state``, for a recurrent policy)."""
        return self.critic(self.features(obs)).squeeze(-1)


class RecurrentActorCritic(ActorCritic):
    """Torso, then an LSTM or GRU cell, then the policy and value heads.

    The state of a row is a ``(state_size,)`` float32 tensor: ``[h, c]`` for an LSTM, ``h`` for
    a GRU. ``forward`` is one step for every row; ``unroll`` replays whole sequences for the
    update with the same cell, so it recomputes the rollout's outputs exactly.
    """

    is_recurrent = True

    def __init__(
        self,
        torso: nn.Module,
        torso_dim: int,
        num_actions: int,
        encoder: ObsEncoder,
        core: str,
        core_size: int,
    ):
        super().__init__(torso, core_size, num_actions, encoder)
        if core not in ("lstm", "gru"):
            raise ValueError(f"unknown model.core {core!r}; valid: {', '.join(CORES)}")
        self.core_kind = core
        self.core_size = core_size
        self.core = (nn.LSTMCell if core == "lstm" else nn.GRUCell)(torso_dim, core_size)
        for name, param in self.core.named_parameters():  # CleanRL's LSTM initialisation
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.state_size = (2 if core == "lstm" else 1) * core_size

    def initial_state(self, num_rows: int, device=None) -> torch.Tensor:
        """Zeros ``(num_rows, state_size)``: the state of rows whose episodes just started."""
        device = device if device is not None else self.actor.weight.device
        return torch.zeros((num_rows, self.state_size), device=device)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        """The input half of the gates, ``x @ W_ih^T`` plus the biases (an LSTM's two biases
        both; a GRU's hidden bias stays inside its reset gate), for any number of steps at
        once."""
        c = self.core
        bias = c.bias_ih + c.bias_hh if self.core_kind == "lstm" else c.bias_ih
        return torch.addmm(bias, x, c.weight_ih.t())  # bf16 under autocast, like the torso

    def _step(self, gx: torch.Tensor, h: torch.Tensor, cell):
        """One core step from the input gates ``gx``: the next ``(h, cell)`` (cell None for a
        GRU)."""
        c = self.core
        if self.core_kind == "lstm":
            return recurrent.lstm_step(gx, h, cell, c.weight_hh)
        return recurrent.gru_step(gx, h, c.weight_hh, c.bias_hh), None

    def _split(self, state: torch.Tensor):
        """``(h, cell)`` views of a state (cell None for a GRU)."""
        if self.core_kind == "lstm":
            return state[:, : self.core_size], state[:, self.core_size :]
        return state, None

    def _join(self, h: torch.Tensor, cell) -> torch.Tensor:
        return h if cell is None else torch.cat((h, cell), dim=1)

    def forward(self, obs: torch.Tensor, state=None, episode_starts=None):
        """One step: logits ``(B, num_actions)``, values ``(B,)`` and the next state. A
        ``None`` state is a fresh one; rows where ``episode_starts`` is true restart."""
        if state is None:
            state = self.initial_state(obs.shape[0], obs.device)
        if episode_starts is not None:
            state = state.masked_fill(episode_starts[:, None], 0.0)
        h, cell = self._step(self._inputs(self.features(obs)), *self._split(state))
        return self.actor(h), self.critic(h).squeeze(-1), self._join(h, cell)

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor):
        """Replay ``M`` sequences of ``H`` steps: ``obs (H, M, ...)`` from initial states
        ``(M, state_size)``, restarting rows where ``episode_starts (H, M)`` is true. Returns
        logits ``(H, M, num_actions)`` and values ``(H, M)``. The input gates of every step
        come from one matrix product; only the recurrence runs step by step."""
        steps, rows = episode_starts.shape
        gx = self._inputs(self.features(obs.reshape(steps * rows, *obs.shape[2:])))
        keep = (~episode_starts)[..., None].float()  # 0 where a row restarts
        h, cell = self._split(state)
        # the recurrence in float32 (under bf16 autocast too: errors would compound over steps)
        with torch.autocast(gx.device.type, enabled=False):
            gx = gx.float().reshape(steps, rows, -1)
            hidden = recurrent.replay(gx, h, cell, keep, self.core.weight_hh, self.core.bias_hh)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)

    def value(self, obs: torch.Tensor, state=None) -> torch.Tensor:
        """Values of ``obs`` seen from ``state`` (not restarted: the step continues it)."""
        return self.forward(obs, state)[1]


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


def make_torso(
    obs_shape, model, device="cpu", categories: int = 0, layer_norm: bool = False
) -> nn.Module:
    """The shared body chosen by the ``[model]`` config: an MLP or a small CNN; ``categories``
    > 0 means observations are codes the encoder one-hots first. ``layer_norm`` normalises
    every hidden layer before its activation (PQN's stabiliser): ``LayerNorm`` after a linear
    layer, ``GroupNorm`` with one group (a LayerNorm over the whole feature map) after a
    convolution."""
    kind = _kind(obs_shape, model, device, categories)

    def norm(layer: nn.Module, width: int) -> list[nn.Module]:
        if not layer_norm:
            return [layer]
        return [
            layer,
            nn.GroupNorm(1, width) if isinstance(layer, nn.Conv2d) else nn.LayerNorm(width),
        ]

    if categories:  # the one-hot adds a channel axis (first, for the CNN) or a last axis
        obs_shape = (categories, *obs_shape) if kind == "cnn" else (*obs_shape, categories)
    if kind == "cnn":
        channels, height, width = obs_shape
        c = model.channels
        convs: list[nn.Module] = []
        for k in range(model.layers):  # 3x3 convolutions that keep the grid's size
            conv = layer_init(nn.Conv2d(channels if k == 0 else c, c, 3, padding=1))
            convs += [*norm(conv, c), nn.ReLU()]
        return nn.Sequential(
            *convs,
            nn.Flatten(),
            *norm(layer_init(nn.Linear(c * height * width, model.hidden)), model.hidden),
            nn.ReLU(),
        )
    if kind == "mlp":
        size = int(np.prod(obs_shape))
        layers: list[nn.Module] = [nn.Flatten()]
        for k in range(model.layers):
            linear = layer_init(nn.Linear(size if k == 0 else model.hidden, model.hidden))
            layers += [
                *norm(linear, model.hidden),
                nn.Tanh() if model.activation == "tanh" else nn.ReLU(),
            ]
        return nn.Sequential(*layers)
    raise ValueError(f"unknown model.kind {kind!r}; valid: {', '.join(MODEL_KINDS)}")


# float32 copies of every weight while training: the weights, their gradients, Adam's two moments
TRAINING_COPIES = 4


def torso_numel(
    obs_shape, model, device="cpu", categories: int = 0, layer_norm: bool = False
) -> int:
    """Weights in ``make_torso``'s network, counted by arithmetic, building nothing: a config
    claiming 100,000 layers is refused in microseconds (building even on the meta device takes
    minutes), and a number too big for memory is still just a number."""
    kind = _kind(obs_shape, model, device, categories)
    if categories:
        obs_shape = (categories, *obs_shape) if kind == "cnn" else (*obs_shape, categories)
    norm = 2 if layer_norm else 0  # LayerNorm / GroupNorm(1, width): a weight and a bias each
    if kind == "cnn":
        channels, height, width = obs_shape
        c = model.channels
        convs = (channels * 9 * c + c + norm * c) + (model.layers - 1) * (c * 9 * c + c + norm * c)
        return convs + c * height * width * model.hidden + model.hidden * (1 + norm)
    size = math.prod(obs_shape)
    h = model.hidden
    first = size * h + h + norm * h
    return first + (model.layers - 1) * (h * h + h + norm * h)


def training_nbytes(obs_shape, model, device="cpu", categories: int = 0) -> int:
    """Bytes the torso of ``make_torso`` takes to train (``TRAINING_COPIES`` of its float32
    weights), counted without building it, so a network too big for the machine is refused
    before any of it is allocated (the heads are a small share and left out)."""
    return TRAINING_COPIES * 4 * torso_numel(obs_shape, model, device, categories)


def make_policy(
    obs_shape, obs_dtype, num_actions: int, model, device="cpu", obs_categories: int = 0
) -> ActorCritic:
    """The actor-critic of the ``[model]`` config (see ``make_torso``), with the recurrent core
    ``model.core`` between the torso and the heads unless it is ``"none"``."""
    encoder = _encoder(obs_shape, obs_dtype, model, device, obs_categories)
    torso = make_torso(obs_shape, model, device, obs_categories)
    core = getattr(model, "core", "none")
    if core == "none":
        return ActorCritic(torso, model.hidden, num_actions, encoder).to(device)
    policy = RecurrentActorCritic(torso, model.hidden, num_actions, encoder, core, model.core_size)
    return policy.to(device)


def make_q_network(
    obs_shape,
    obs_dtype,
    num_actions: int,
    model,
    device="cpu",
    dueling: bool = False,
    obs_categories: int = 0,
    layer_norm: bool = False,
) -> QNetwork:
    """The Q-network of the ``[model]`` config (see ``make_torso``; ``layer_norm`` after each
    hidden layer)."""
    encoder = _encoder(obs_shape, obs_dtype, model, device, obs_categories)
    torso = make_torso(obs_shape, model, device, obs_categories, layer_norm)
    return QNetwork(torso, model.hidden, num_actions, encoder, dueling).to(device)

"""Recurrent cores: one LSTM or GRU step, and the replay of whole sequences with restarts.

The arithmetic is ``nn.LSTMCell`` / ``nn.GRUCell``'s (gate order i, f, g, o and r, z, n). The
input half of the gates (``x @ W_ih^T`` plus biases) comes in precomputed, for every step at
once; only the recurrence ``h @ W_hh^T`` runs step by step.

``replay`` runs the same steps as the rollout (so it recomputes the rollout's outputs exactly)
under autograd. A hand-written backward (gate derivatives per step, the recurrent weights'
gradient in one product over all steps) measured no faster on 2 CPU cores, so it was dropped.
"""

from __future__ import annotations

import torch


def lstm_step(gx: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh: torch.Tensor):
    """One LSTM step from input gates ``gx (M, 4n)``: the next ``(h, c)``."""
    # split, not slices: one backward (a cat) for the four gates instead of four zero-filled
    # copies of the whole gate matrix
    i, f, g, o = torch.addmm(gx, h, w_hh.t()).split(h.shape[1], dim=1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def gru_step(gx: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor):
    """One GRU step from input gates ``gx (M, 3n)`` (input bias included): the next ``h``."""
    n = h.shape[1]
    x_r, x_z, x_n = gx.split(n, dim=1)
    h_r, h_z, h_n = torch.addmm(b_hh, h, w_hh.t()).split(n, dim=1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    new = torch.tanh(x_n + r * h_n)
    return new + z * (h - new)


def replay(gx, h, c, keep, w_hh, b_hh=None) -> torch.Tensor:
    """Outputs ``h (H, M, n)`` of ``H`` steps of ``M`` sequences: input gates ``gx (H, M, G)``,
    initial ``h`` and (LSTM) ``c`` ``(M, n)`` (``c=None``: a GRU, with ``b_hh``), and ``keep
    (H, M, 1)``, 0 where a sequence restarts before that step (1 elsewhere)."""
    # unbind, not gx[t]: one backward for all steps (indexing's would zero-fill each step)
    inputs, keeps = gx.unbind(0), keep.unbind(0)
    outputs = []
    for t in range(len(inputs)):
        h = h * keeps[t]
        if c is None:
            h = gru_step(inputs[t], h, w_hh, b_hh)
        else:
            h, c = lstm_step(inputs[t], h, c * keeps[t], w_hh)
        outputs.append(h)
    return torch.stack(outputs)

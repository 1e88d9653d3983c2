"""What the five MinAtar games share: their colour pictures.

MinAtar's ``Environment.display_state`` colours a cell by the highest channel set in it (channel
``c`` gets colour ``c + 1``; an empty cell is black), from seaborn's ``cubehelix`` palette of as
many colours as the game has channels. That palette samples matplotlib's ``cubehelix`` colour map
(D. A. Green's cube helix with gamma 1, start 0.5, rotations -1.5, hue 1) at ``n`` evenly spaced
points strictly inside [0, 1], from its 256-entry table. It is computed here with NumPy, so
neither seaborn nor matplotlib is needed; tests/games/test_minatar_rgb.py checks it against
matplotlib's map.
"""

from __future__ import annotations

import functools

import numpy as np

# cubehelix's colour directions: (cos, sin) coefficients for red, green and blue
_HELIX = ((-0.14861, 1.78277), (-0.29227, -0.90649), (1.97294, 0.0))
_LUT_SIZE = 256  # matplotlib's default colour-map table


@functools.cache
def palette(num_channels: int) -> np.ndarray:
    """uint8 ``(num_channels + 1, 3)``: black, then channel ``c``'s colour at row ``c + 1``."""
    points = np.linspace(0.0, 1.0, num_channels + 2)[1:-1]
    index = np.minimum((points * _LUT_SIZE).astype(np.int64), _LUT_SIZE - 1)
    x = index / (_LUT_SIZE - 1)  # the table entry each point falls in
    amplitude = x * (1.0 - x) / 2.0
    phi = 2.0 * np.pi * (0.5 / 3.0 - 1.5 * x)
    rgb = np.stack([x + amplitude * (p0 * np.cos(phi) + p1 * np.sin(phi)) for p0, p1 in _HELIX])
    colours = np.clip(rgb.T, 0.0, 1.0)
    table = np.zeros((num_channels + 1, 3), dtype=np.uint8)
    table[1:] = np.round(colours * 255.0).astype(np.uint8)
    table.flags.writeable = False
    return table


def render_rgb(state, obs, params) -> np.ndarray:
    """uint8 ``(10, 10, 3)`` picture of one MinAtar observation ``(C, 10, 10)``, coloured as
    MinAtar's own display: each cell takes the colour of the highest channel set in it."""
    obs = np.asarray(obs)
    channels = obs.shape[0]
    weights = np.arange(1, channels + 1).reshape(channels, 1, 1)
    top = (obs.astype(np.int64) * weights).max(axis=0)
    return palette(channels)[top]

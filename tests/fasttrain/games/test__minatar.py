"""fasttrain.games._minatar, the base the MinAtar games share: colour pictures in MinAtar's
palette with its highest-channel-wins rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fasttrain
from fasttrain import games
from fasttrain.games._minatar import palette, render_rgb

MINATAR = [name for name in games.names() if name.startswith("minatar-")]


@pytest.mark.parametrize("channels", [3, 4, 6, 7, 10])
def test_palette_is_seaborns_cubehelix_from_matplotlibs_map(channels):
    """seaborn's ``color_palette("cubehelix", n)`` samples matplotlib's map strictly inside
    [0, 1] (seaborn itself is not installed: its sampling rule is reproduced here)."""
    matplotlib = pytest.importorskip("matplotlib")
    points = np.linspace(0, 1, channels + 2)[1:-1]
    expected = np.round(matplotlib.colormaps["cubehelix"](points)[:, :3] * 255)
    table = palette(channels)
    assert table.dtype == np.uint8 and table.shape == (channels + 1, 3)
    assert np.array_equal(table[0], [0, 0, 0])
    assert np.array_equal(table[1:], expected.astype(np.uint8))


def test_highest_channel_wins_and_empty_cells_are_black():
    obs = np.zeros((4, 10, 10), dtype=np.uint8)
    obs[0, 9, 4] = 1  # one channel
    obs[1, 3, 3] = obs[3, 3, 3] = 1  # two channels in one cell: the higher (3) shows
    obs[2, 0, 0] = 1
    picture = render_rgb({}, obs, None)
    table = palette(4)
    assert picture.shape == (10, 10, 3) and picture.dtype == np.uint8
    assert np.array_equal(picture[9, 4], table[1])
    assert np.array_equal(picture[3, 3], table[4])
    assert np.array_equal(picture[0, 0], table[3])
    lit = np.zeros((10, 10), dtype=bool)
    lit[9, 4] = lit[3, 3] = lit[0, 0] = True
    assert not picture[~lit].any()


@pytest.mark.parametrize("game", MINATAR)
def test_every_minatar_game_renders_its_observation(game):
    env = fasttrain.make(game, num_envs=3, backend="cpu", seed=4)
    gen = np.random.default_rng(0)
    for _ in range(20):
        env.step(gen.integers(0, env.num_actions, 3))
    for i in range(3):
        obs = env.obs[i].numpy()
        picture = env.render_rgb(i)
        assert picture.shape == (10, 10, 3) and picture.dtype == np.uint8
        assert np.array_equal(picture, render_rgb({}, obs, env.params))
        assert np.array_equal(picture.any(axis=2), obs.any(axis=0))


def test_a_game_without_colour_rendering_says_so():
    from fasttrain.games import snake
    from fasttrain.kernels import KernelEnv

    spec = dataclasses.replace(snake.SPEC, name="snake-no-rgb", render_rgb=None)
    env = KernelEnv(spec, 1, "python", spec.make_params())
    with pytest.raises(ValueError, match="no colour rendering"):
        env.render_rgb(0)

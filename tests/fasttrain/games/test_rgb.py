"""Colour pictures of Snake, CartPole and the arena land where the state says."""

import numpy as np
import torch

import fasttrain
from fasttrain.games import arena, cartpole, snake


def test_snake_colours_sit_on_the_head_body_and_fruit():
    env = fasttrain.make("snake", num_envs=2, backend="python", seed=4, height=7, width=9)
    for _ in range(5):
        env.step(torch.tensor([1, 2]))
    for i in range(2):
        picture = env.render_rgb(i)
        obs = env.obs[i].numpy()
        assert picture.shape == (7, 9, 3) and picture.dtype == np.uint8
        head, fruit = obs[1] == 1, obs[2] == 1
        body = (obs[0] == 1) & ~head
        assert (picture[head] == snake.PALETTE[2]).all()
        assert (picture[body] == snake.PALETTE[1]).all()
        assert (picture[fruit] == snake.PALETTE[3]).all()
        empty = (obs[0] == 0) & ~fruit
        assert (picture[empty] == snake.PALETTE[0]).all()


def test_cartpole_cart_moves_right_with_x_and_the_pole_leans_with_theta():
    spec, params = cartpole.SPEC, cartpole.CartPoleParams()

    def picture(x, theta):
        state = {"x": x, "x_dot": 0.0, "theta": theta, "theta_dot": 0.0, "steps": 0}
        return spec.render_rgb(state, None, params)

    def cart_column(image):
        cart = (image[cartpole.RGB_TRACK_ROW - 2] == cartpole.CART).all(axis=1)
        return np.flatnonzero(cart).mean()

    def pole_tip_column(image):
        pole = (image == cartpole.POLE).all(axis=2)
        rows = np.flatnonzero(pole.any(axis=1))
        return np.flatnonzero(pole[rows.min()]).mean()

    assert cart_column(picture(-1.0, 0.0)) < cart_column(picture(0.0, 0.0))
    assert cart_column(picture(0.0, 0.0)) < cart_column(picture(1.5, 0.0))
    upright = picture(0.0, 0.0)
    assert pole_tip_column(picture(0.0, 0.15)) > pole_tip_column(upright)
    assert pole_tip_column(picture(0.0, -0.15)) < pole_tip_column(upright)


def test_arena_pictures_mark_walls_food_and_each_snake():
    env = fasttrain.make("arena", num_envs=1, backend="python", seed=2)
    env.step(torch.zeros(env.num_rows, dtype=torch.int64))
    picture = env.render_rgb(0)
    params = env.params
    grid = np.asarray(env.state["grid"][0]).reshape(params.height, params.width)
    assert picture.shape == (params.height, params.width, 3)
    for tile in (arena.FOOD, arena.WALL, arena.EMPTY):
        where = grid == tile
        assert where.any(), tile
        assert (picture[where] == arena._TILE_RGB[tile]).all()
    heads = {int(env.state["head"][0][k]) for k in range(params.num_snakes)}
    colours = {tuple(picture.reshape(-1, 3)[cell]) for cell in heads}
    assert len(colours) == min(params.num_snakes, len(arena._SNAKE_RGB))  # one per snake

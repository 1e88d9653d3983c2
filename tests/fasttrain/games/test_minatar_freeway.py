"""MinAtar Freeway against the ``minatar`` package, step for step (``minatar_parity.py``).

MinAtar draws the sticky-action ``rand()``, and the cars' ``randint(1, 6, 8)`` speeds and
``rand(8)`` directions, one by one.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_freeway as game
from tests.fasttrain.games.minatar_parity import Ours, drawing, play, random_player


def act(env, full, covered):
    """MinAtar's step, counting crossings and hits (sent back to the bottom by a car)."""
    before = env.env.pos
    reward, terminal = env.act(full)
    covered["hits"] += env.env.pos == 9 and before < 9 and reward == 0
    covered["crossings"] += reward
    return reward, terminal


def copy_from(env, s):
    """MinAtar's game state into ours (the approach gymnax's tests use)."""
    e = env.env
    s["pos"][0], s["move_timer"][0] = e.pos, e.move_timer
    s["terminate_timer"][0] = e.terminate_timer
    for k, (x, _, timer, speed) in enumerate(e.cars):
        s["car_x"][0, k], s["car_timer"][0, k], s["car_speed"][0, k] = x, timer, speed
    s["last_action"][0] = env.last_action


def climber(obs, generator):
    """A scripted player: up unless a car is next to the lane above (many crossings, some
    hits), with a random action now and then."""
    if generator.random() < 0.05:
        return int(generator.integers(6))
    row = int(np.argmax(obs[game.CHICKEN][:, game.CHICKEN_COLUMN]))
    if row == 0:
        return game.UP
    cars = obs[game.CAR][row - 1]
    near = cars[game.CHICKEN_COLUMN - 1 : game.CHICKEN_COLUMN + 2].any()
    return game.NOOP if near else game.UP


def test_random_play_matches_minatar_through_the_time_limit():
    covered = play(game, random_player, 5100, 0, act=act)
    assert covered["episodes"] == 2 and covered["sticky"] > 300, covered


@pytest.mark.parametrize("seed", [1, 2])
def test_scripted_play_matches_minatar(seed):
    covered = play(game, climber, 2700, seed, act=act)
    assert covered["crossings"] >= 20 and covered["hits"] >= 5 and covered["episodes"] == 1


def test_state_copied_each_step_matches_minatar_with_wrapped_and_fast_cars():
    """MinAtar's state copied in before each step, its cars now and then put at the edges
    (wrap-around both ways) or right beside the chicken, with every speed."""

    def tamper(env, step):
        if step % 25 == 0:
            for k, car in enumerate(env.env.cars):
                speed = (k + step // 25) % 5 + 1
                car[3] = speed if (k + step) % 2 else -speed
                car[2] = (k + step) % (speed + 1)
                car[0] = (9, 0, 3, 4, 5)[(k + step // 25) % 5]

    covered = play(game, climber, 2000, 3, act=act, copy_from=copy_from, tamper=tamper)
    assert covered["hits"] >= 20 and covered["crossings"] >= 3, covered


def test_minimal_action_set_and_no_sticky_actions():
    covered = play(game, climber, 1200, 4, sticky=0.0, minimal=True, act=act)
    assert covered["sticky"] == 0 and covered["crossings"] > 0


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game, game.FreewayParams(sticky_action_prob=1.0))
    with drawing(game, rand_float=lambda rng, i: 0.9, rand_int=lambda rng, i, n: 0):
        ours.reset()
        ours.state["last_action"][0] = game.UP
        ours.state["move_timer"][0] = 0
        ours.reset()  # a new episode: the chicken on row 9, its move timer at 3
        ours.state["move_timer"][0] = 0
        ours.step(game.DOWN)  # always sticky: the up move repeats
    assert int(ours.state["pos"][0]) == 8


def test_params_are_checked():
    with pytest.raises(ValueError, match="sticky_action_prob"):
        game.FreewayParams(sticky_action_prob=1.5)
    with pytest.raises(ValueError, match="max_episode_steps"):
        game.FreewayParams(max_episode_steps=-1)


def test_render_text_shows_the_screen():
    ours = Ours(game, game.FreewayParams())
    # speed 3 everywhere, rightwards
    with drawing(game, rand_float=lambda rng, i: 0.9, rand_int=lambda rng, i, n: i + 2):
        ours.reset()
    lines = game.render_text(ours.screen(), game.FreewayParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[1] == "|..........|" and lines[10] == "|....C.....|"
    assert all(lines[1 + lane] == "|>........3|" for lane in range(1, 9))

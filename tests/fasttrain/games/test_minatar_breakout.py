"""MinAtar Breakout against the ``minatar`` package, step for step (``minatar_parity.py``).

MinAtar draws the sticky-action ``rand()`` and the reset's ``randint(2)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_breakout as game
from tests.fasttrain.games.minatar_parity import Ours, drawing, play, random_player


def act(env, full, covered):
    """MinAtar's step, counting bricks broken and refills of the field."""
    before = env.env.brick_map.sum()
    reward, terminal = env.act(full)
    covered["refills"] += env.env.brick_map.sum() > before
    covered["bricks"] += reward
    return reward, terminal


def copy_from(env, s):
    """MinAtar's game state into ours (the approach gymnax's tests use)."""
    e = env.env
    for name in ("ball_x", "ball_y", "ball_dir", "last_x", "last_y", "pos"):
        s[name][0] = getattr(e, name)
    s["strike"][0] = e.strike
    s["bricks"][0] = e.brick_map.reshape(-1)
    s["last_action"][0] = env.last_action


def chase(obs, generator):
    """A scripted player: the paddle follows the ball (long episodes, refills, strikes), with
    a random action now and then."""
    if generator.random() < 0.03:
        return int(generator.integers(6))
    ball = int(np.argmax(obs[game.BALL].max(axis=0)))
    trail = int(np.argmax(obs[game.TRAIL].max(axis=0)))
    target = min(max(2 * ball - trail, 0), game.SIZE - 1)  # where the ball goes next
    paddle = int(np.argmax(obs[game.PADDLE][game.SIZE - 1]))
    return game.RIGHT if target > paddle else game.LEFT if target < paddle else game.NOOP


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_play_matches_minatar(seed):
    covered = play(game, random_player, 3000, seed, act=act)
    assert covered["episodes"] >= 50 and covered["sticky"] > 100


@pytest.mark.parametrize("seed", [3, 4])
def test_scripted_play_matches_minatar(seed):
    covered = play(game, chase, 6000, seed, act=act)
    assert covered["bricks"] >= 300 and covered["episodes"] >= 10, covered


def test_state_copied_each_step_matches_minatar_through_refills():
    """With MinAtar's state copied in before each step, and bricks knocked out now and then
    (down to none, or one), the refill when the ball reaches the bottom row and the strike
    flag's blocking of a second brick are covered."""

    def tamper(env, step):
        if step % 40 == 0:
            bricks = env.env.brick_map
            bricks[:] = 0
            if step % 80 == 0:
                bricks[2, step // 80 % 10] = 1

    covered = play(game, chase, 4000, 5, act=act, copy_from=copy_from, tamper=tamper)
    assert covered["refills"] >= 10 and covered["episodes"] >= 3, covered


def test_minimal_action_set_and_no_sticky_actions():
    covered = play(game, chase, 2000, 6, sticky=0.0, minimal=True, act=act)
    assert covered["sticky"] == 0 and covered["bricks"] > 0


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    params = game.BreakoutParams(sticky_action_prob=1.0)
    ours = Ours(game, params)
    with drawing(game, rand_float=lambda rng, i: 0.5, rand_int=lambda rng, i, n: 0):
        ours.reset()
        ours.state["last_action"][0] = game.RIGHT
        ours.reset()  # a new episode: the paddle starts in column 4
        ours.step(game.LEFT)  # always sticky: the right move repeats
    assert int(ours.state["pos"][0]) == 5


def test_render_text_shows_the_screen():
    import fasttrain

    env = fasttrain.make("minatar-breakout", num_envs=1, backend="python", seed=0)
    text = env.render(0)
    lines = text.splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    # the ball starts on row 3, inside the bottom row of bricks (MinAtar's start), drawn on top
    assert text.count("#") == 29 and text.count("=") == 1 and text.count("o") == 1
    assert lines[4] in ("|o#########|", "|#########o|") and lines[10] == "|....=.....|"

"""MinAtar Space Invaders against the ``minatar`` package, step for step
(tests/fasttrain/games/minatar_parity.py).

The game is deterministic: MinAtar's only random number is the sticky-action ``rand()``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_space_invaders as game
from tests.fasttrain.games.minatar_parity import Ours, drawing, play, random_player


def act(env, full, covered):
    """MinAtar's step, counting kills, new waves, the fastest aliens and deaths by a bullet."""
    reward, terminal = env.act(full)
    e = env.env
    covered["waves"] += reward > 0 and e.alien_map.sum() == 24  # a new block
    covered["top_ramp"] += e.enemy_move_interval == game.FASTEST_MOVE_INTERVAL
    covered["shot"] += terminal and e.e_bullet_map[9, e.pos] == 1
    covered["kills"] += reward
    return reward, terminal


def check(env, ours, where):
    assert int(ours.state["ramp_index"][0]) == env.env.ramp_index, where


def copy_from(env, s):
    """MinAtar's game state into ours (the approach gymnax's tests use)."""
    e = env.env
    s["pos"][0], s["alien_dir"][0] = e.pos, e.alien_dir
    s["move_interval"][0], s["alien_move_timer"][0] = e.enemy_move_interval, e.alien_move_timer
    s["alien_shot_timer"][0], s["shot_timer"][0] = e.alien_shot_timer, e.shot_timer
    s["ramp_index"][0] = e.ramp_index
    s["aliens"][0] = e.alien_map.reshape(-1)
    s["f_bullets"][0] = e.f_bullet_map.reshape(-1)
    s["e_bullets"][0] = e.e_bullet_map.reshape(-1)
    s["last_action"][0] = env.last_action


def gunner(obs, generator):
    """A scripted player: dodges a bullet about to land, else walks under the nearest alien
    column and fires (kills many waves, so the ramp is reached), with random actions mixed in."""
    if generator.random() < 0.05:
        return int(generator.integers(6))
    pos = int(np.argmax(obs[game.CANNON][game.SIZE - 1]))
    danger = obs[game.ENEMY_BULLET][5:9].any(axis=0)  # a bullet lands within 4 steps
    columns = np.flatnonzero(obs[game.ALIEN].any(axis=0))
    target = int(columns[np.argmin(np.abs(columns - pos))]) if len(columns) else pos
    step = 0 if target == pos else (-1 if target < pos else 1)
    if danger[pos] or (step and danger[pos + step]):
        for side in (-1, 1):
            if 0 <= pos + side < game.SIZE and not danger[pos + side]:
                return game.LEFT if side < 0 else game.RIGHT
    if step == 0:
        return game.FIRE
    return game.LEFT if target < pos else game.RIGHT


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(game, random_player, 2500, seed, ramping=True, act=act, check=check)
    assert covered["episodes"] >= 5 and covered["kills"] >= 20 and covered["sticky"] > 100


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(game, gunner, 4000, seed, ramping=True, act=act, check=check)
    assert covered["kills"] >= 300 and covered["shot"] >= 10, covered


def test_state_copied_each_step_matches_minatar_with_aliens_at_the_edges():
    """MinAtar's state copied in before each step; now and then the block is moved to an edge
    or down to the bottom rows, a single alien is left, or bullets are scattered."""

    def tamper(env, step):
        e = env.env
        if step % 50 == 0:
            kind = step // 50 % 4
            e.alien_map[:] = 0
            if kind == 0:  # the block against the left edge, marching left: it turns and drops
                e.alien_map[3:7, 0:6] = 1
                e.alien_dir = -1
            elif kind == 1:  # against the right edge, on the bottom rows
                e.alien_map[6:10, 4:10] = 1
                e.alien_dir = 1
            elif kind == 2:  # the last alien, about to be shot: a new, faster wave
                e.alien_map[5, step % 10] = 1
                e.f_bullet_map[6, step % 10] = 1
                e.alien_move_timer = 2
                e.enemy_move_interval = 6 + step // 200 % 3  # the fastest, or nearly
            else:
                e.alien_map[0:4, 2:8] = 1
                e.e_bullet_map[8, :] = 1
                e.f_bullet_map[4, :] = 1

    covered = play(
        game,
        gunner,
        2000,
        4,
        ramping=True,
        act=act,
        check=check,
        copy_from=copy_from,
        tamper=tamper,
    )
    assert covered["episodes"] >= 10 and covered["kills"] >= 30, covered
    assert covered["waves"] >= 5 and covered["top_ramp"] > 0, covered


def test_minimal_action_set_no_sticky_actions_and_no_ramping():
    covered = play(
        game, gunner, 2500, 5, sticky=0.0, ramping=False, minimal=True, act=act, check=check
    )
    assert covered["sticky"] == 0 and covered["kills"] >= 100, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game, game.SpaceInvadersParams(sticky_action_prob=1.0))
    with drawing(game, rand_float=lambda rng, i: 0.5):
        ours.reset()
        ours.state["last_action"][0] = game.RIGHT
        ours.reset()  # a new episode: the cannon in column 5
        ours.step(game.LEFT)  # always sticky: the right move repeats
    assert int(ours.state["pos"][0]) == 6


def test_params_are_checked():
    with pytest.raises(ValueError, match="sticky_action_prob"):
        game.SpaceInvadersParams(sticky_action_prob=-0.1)
    with pytest.raises(ValueError, match="max_episode_steps"):
        game.SpaceInvadersParams(max_episode_steps=-1)


def test_render_text_shows_the_screen():
    ours = Ours(game, game.SpaceInvadersParams())
    ours.reset()
    ours.state["f_bullets"][0, 5 * 10 + 5] = 1
    lines = game.render_text(ours.screen(), game.SpaceInvadersParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[1:5] == ["|..<<<<<<..|"] * 4
    assert lines[6] == "|.....|....|" and lines[10] == "|.....A....|"

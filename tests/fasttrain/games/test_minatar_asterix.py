"""MinAtar Asterix against the ``minatar`` package, step for step (``minatar_parity.py``).

MinAtar draws the sticky-action ``rand()``, and a spawn's two ``rand()`` and its ``randint(free
lanes)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_asterix as game
from tests.fasttrain.games.minatar_parity import Ours, drawing, play, random_player


def act(env, full, covered):
    """MinAtar's step, counting gold, spawns into full lanes, the top ramp and the longest
    episode."""
    covered["full"] += env.env.spawn_timer == 0 and None not in env.env.entities
    reward, terminal = env.act(full)
    covered["top_ramp"] += env.env.spawn_speed == 1 and env.env.move_speed == 1
    covered["gold"] += reward
    covered["length"] += 1
    if terminal:
        covered["longest"] = max(covered["longest"], covered["length"])
        covered["length"] = 0
    return reward, terminal


def check(env, ours, where):
    assert int(ours.state["ramp_index"][0]) == env.env.ramp_index, where


def copy_from(env, s):
    """MinAtar's game state into ours (the approach gymnax's tests use)."""
    e = env.env
    for name in ("player_x", "player_y", "spawn_speed", "spawn_timer", "move_speed"):
        s[name][0] = getattr(e, name)
    for name in ("move_timer", "ramp_timer", "ramp_index"):
        s[name][0] = getattr(e, name)
    s["entities"][0] = 0
    for k, entity in enumerate(e.entities):
        if entity is not None:
            x, _, rightward, gold = entity
            s["entities"][0, k] = (1, x, rightward, gold)
    s["last_action"][0] = env.last_action


MOVES = {
    game.NOOP: (0, 0),
    game.LEFT: (-1, 0),
    game.RIGHT: (1, 0),
    game.UP: (0, -1),
    game.DOWN: (0, 1),
}


def collector(obs, generator):
    """A scripted player: steps toward the nearest gold, away from cells next to an enemy (long
    episodes, many golds, late ramp levels), with a random action now and then."""
    if generator.random() < 0.03:
        return int(generator.integers(6))
    y, x = np.unravel_index(np.argmax(obs[game.PLAYER]), (10, 10))
    enemies = np.argwhere(obs[game.ENEMY])
    golds = np.argwhere(obs[game.GOLD])
    best, best_score = game.NOOP, -np.inf
    for action, (dx, dy) in MOVES.items():
        nx, ny = min(max(x + dx, 0), 9), min(max(y + dy, 1), 8)
        danger = sum(1 for ey, ex in enemies if ey == ny and abs(ex - nx) <= 1)
        near = min((abs(gy - ny) + abs(gx - nx) for gy, gx in golds), default=0)
        score = -10 * danger - near
        if score > best_score:
            best, best_score = action, score
    return best


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(game, random_player, 2500, seed, act=act, check=check)
    assert covered["episodes"] >= 10 and covered["gold"] >= 5 and covered["sticky"] > 100, covered


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(game, collector, 4000, seed, act=act, check=check)
    assert covered["gold"] >= 100 and covered["longest"] >= 500, covered


def test_state_copied_each_step_matches_minatar_with_full_lanes_and_the_top_ramp():
    """MinAtar's state copied in before each step; now and then every lane is filled (a spawn
    finds no free lane), entities are put at the edges or beside the player, or the ramp is
    pushed to its end."""

    def tamper(env, step):
        e = env.env
        if step % 30 == 0:
            kind = step // 30 % 3
            if kind == 0:  # every lane busy, a spawn due
                e.entities = [[(k * 3) % 10, k + 1, k % 2 == 0, k % 3 == 0] for k in range(8)]
                e.spawn_timer = 0
            elif kind == 1:  # at the edges, about to leave, and beside the player
                e.entities = [None] * 8
                e.entities[0] = [9, 1, True, False]
                e.entities[1] = [0, 2, False, True]
                y = e.player_y
                e.entities[y - 1] = [min(e.player_x + 1, 9), y, False, step % 60 == 0]
                e.move_timer = 0
            else:  # the fastest settings, or one ramp away from them
                e.spawn_speed, e.move_speed = 1 + step % 2, 1 + step % 2
                e.ramp_timer = step % 3 - 1

    covered = play(
        game, collector, 2400, 4, act=act, check=check, copy_from=copy_from, tamper=tamper
    )
    assert covered["full"] >= 20 and covered["top_ramp"] > 0 and covered["episodes"] >= 5, covered


def test_minimal_action_set_no_sticky_actions_and_no_ramping():
    covered = play(
        game, collector, 2000, 5, sticky=0.0, ramping=False, minimal=True, act=act, check=check
    )
    assert covered["sticky"] == 0 and covered["gold"] >= 20 and covered["top_ramp"] == 0, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game, game.AsterixParams(sticky_action_prob=1.0))
    with drawing(game, rand_float=lambda rng, i: 0.9, rand_int=lambda rng, i, n: 0):
        ours.reset()
        ours.state["last_action"][0] = game.UP
        ours.reset()  # a new episode: the player at row 5, column 5
        ours.step(game.DOWN)  # always sticky: the up move repeats
    assert int(ours.state["player_y"][0]) == 4


def test_params_are_checked():
    with pytest.raises(ValueError, match="sticky_action_prob"):
        game.AsterixParams(sticky_action_prob=2.0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        game.AsterixParams(max_episode_steps=-3)


def test_render_text_shows_the_screen():
    ours = Ours(game, game.AsterixParams())
    ours.reset()
    ours.state["entities"][0, 2] = (1, 3, 1, 0)  # an enemy on row 3, column 3, moving right
    ours.state["entities"][0, 6] = (1, 9, 0, 1)  # gold on row 7 at the right edge, moving left
    lines = game.render_text(ours.screen(), game.AsterixParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[4] == "|..-E......|" and lines[8] == "|.........$|"
    assert lines[6] == "|.....P....|" and lines[1] == "|..........|"

"""MinAtar Seaquest against the ``minatar`` package, step for step (``minatar_parity.py``).

MinAtar draws the sticky-action ``rand()``; an enemy spawn's two ``rand()`` and its
``randint(1, 9)`` row; a diver spawn's ``rand()`` and row.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_seaquest as game
from tests.fasttrain.games.minatar_parity import Ours, drawing, play, random_player


def act(env, full, covered):
    """MinAtar's step, counting kills, rescues, six-diver bonuses, surfacings, the ramp and
    MinAtar's quirks (a negative diver count, running out of air)."""
    e = env.env
    held, ramp = e.diver_count, e.ramp_index
    reward, terminal = env.act(full)
    covered["rescued"] += e.diver_count > held
    covered["bonus"] += e.diver_count == -1 and held == 6
    covered["surfaced"] += e.ramp_index > ramp or (e.sub_y == 0 and e.oxygen == 200 and held > 0)
    covered["no_air"] += terminal and e.oxygen <= 0
    covered["shot_at"] += len(e.e_bullets) > 0
    covered["negative"] += e.diver_count < 0
    covered["max_ramp"] = max(covered["max_ramp"], e.ramp_index)
    covered["most_enemies"] = max(covered["most_enemies"], len(e.e_fish) + len(e.e_subs))
    covered["kills"] += reward == 1
    return reward, terminal


def check(env, ours, where):
    s, e = ours.state, env.env
    assert (s["diver_count"][0], s["ramp_index"][0], s["oxygen"][0]) == (
        e.diver_count,
        e.ramp_index,
        e.oxygen,
    ), where


def copy_from(env, s):
    """MinAtar's game state into ours (the approach gymnax's tests use)."""
    e = env.env
    for name, *_ in game.SCALARS:  # MinAtar's names; the lists' lengths are counted below
        if not name.startswith("n_"):
            s[name][0] = getattr(e, name)
    for name, items, count in (
        ("bullets", e.f_bullets, "n_bullets"),
        ("e_bullets", e.e_bullets, "n_e_bullets"),
        ("fish", e.e_fish, "n_fish"),
        ("subs", e.e_subs, "n_subs"),
        ("divers", e.divers, "n_divers"),
    ):
        s[count][0] = len(items)
        for k, item in enumerate(items):
            s[name][0, k] = [int(v) for v in item]
    s["last_action"][0] = env.last_action


def diver(obs, generator):
    """A scripted player: shoots enemies in its row, fetches divers, surfaces when it holds 6 or
    runs low on oxygen (bonuses, ramps, empty surfacings), with a random action now and then."""
    if generator.random() < 0.05:
        return int(generator.integers(6))
    y, x = np.unravel_index(np.argmax(obs[game.SUB_FRONT]), (10, 10))
    back = np.flatnonzero(obs[game.SUB_BACK][y])
    facing_right = len(back) > 0 and (back[0] < x or (x == 0 and back[0] == 9))
    oxygen = int(obs[game.OXYGEN_GAUGE][9].sum())
    held = int(obs[game.DIVER_GAUGE][9].sum())
    if held >= 6 or (oxygen <= 3 and y > 0):
        return game.UP
    enemies = np.flatnonzero(obs[game.ENEMY_FISH][y] | obs[game.ENEMY_SUB][y])
    if y > 0 and len(enemies):
        target = enemies[np.argmin(np.abs(enemies - x))]
        if (target > x) == facing_right:
            return game.FIRE
        return game.RIGHT if target > x else game.LEFT
    divers = np.argwhere(obs[game.DIVER])
    if len(divers):
        dy, dx = divers[np.argmin(np.abs(divers - [y, x]).sum(axis=1))]
        if dy != y:
            return game.DOWN if dy > y else game.UP
        return game.RIGHT if dx > x else game.LEFT
    return game.DOWN if y < 4 else int(generator.choice([game.LEFT, game.RIGHT, game.FIRE]))


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(game, random_player, 2500, seed, ramping=True, act=act, check=check)
    assert covered["episodes"] >= 5 and covered["sticky"] > 100 and covered["shot_at"] > 0, covered


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(game, diver, 4000, seed, ramping=True, act=act, check=check)
    assert covered["kills"] >= 30 and covered["rescued"] >= 10 and covered["surfaced"] >= 3, covered


def test_state_copied_each_step_matches_minatar_through_bonuses_and_the_ramp():
    """MinAtar's state copied in before each step; now and then the submarine is given 6
    divers just below the surface (the bonus, then MinAtar's count of -1), its oxygen is nearly
    gone, or the ramp is pushed to its end with enemies in every row."""

    def tamper(env, step):
        e = env.env
        if step % 40 == 0:
            kind = step // 40 % 4
            if kind == 0:  # 6 divers, one row below the surface
                e.diver_count, e.sub_y, e.surface = 6, 1, False
            elif kind == 1:  # almost out of air, deep down
                e.oxygen, e.sub_y, e.surface = 3, 6, False
            elif kind == 2:  # the fastest settings, spawning every step
                e.e_spawn_speed, e.move_speed, e.e_spawn_timer = 1, 2, 0
                e.ramp_index = 30
            else:  # a sub beside the submarine about to fire, a diver on its cell
                y = max(e.sub_y, 1)
                e.sub_y = y
                e.e_subs.append([min(e.sub_x + 2, 9), y, False, 0, 0])
                e.divers.append([e.sub_x, y, True, 3])

    covered = play(game, diver, 3000, 4, act=act, check=check, copy_from=copy_from, tamper=tamper)
    assert covered["bonus"] >= 3 and covered["negative"] > 0 and covered["no_air"] >= 1, covered
    assert covered["most_enemies"] >= 8 and covered["rescued"] >= 5, covered


def test_no_sticky_actions_and_no_ramping():
    covered = play(
        game, diver, 2000, 5, sticky=0.0, ramping=False, minimal=True, act=act, check=check
    )
    assert covered["sticky"] == 0 and covered["max_ramp"] == 0 and covered["kills"] > 5, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game, game.SeaquestParams(sticky_action_prob=1.0))
    with drawing(game, rand_float=lambda rng, i: 0.9, rand_int=lambda rng, i, n: 0):
        ours.reset()
        ours.state["last_action"][0] = game.DOWN
        ours.reset()  # a new episode: the submarine on the surface
        ours.step(game.UP)  # always sticky: the dive repeats
    assert int(ours.state["sub_y"][0]) == 1


def test_params_are_checked():
    with pytest.raises(ValueError, match="sticky_action_prob"):
        game.SeaquestParams(sticky_action_prob=1.01)
    with pytest.raises(ValueError, match="max_episode_steps"):
        game.SeaquestParams(max_episode_steps=-1)


def test_render_text_shows_the_screen():
    ours = Ours(game, game.SeaquestParams())
    ours.reset()
    ours.state["n_fish"][0], ours.state["n_subs"][0] = 1, 1
    ours.state["fish"][0, 0, :3] = (2, 3, 1)
    ours.state["subs"][0, 0, :3] = (7, 6, 0)
    lines = game.render_text(ours.screen(), game.SeaquestParams()).splitlines()
    assert len(lines) == 13 and all(len(line) == 12 for line in lines[:12])
    assert lines[1] == "|.....<=...|" and lines[4] == "|..f.......|" and lines[7] == "|.......s..|"
    assert lines[12] == "oxygen 200  divers 0  ramp 0"


def test_a_state_from_before_the_scalars_had_names_is_refused_and_nothing_is_written():
    """States of development checkpoints kept Seaquest's 17 scalars as the columns of one array
    ``game``; fasttrain was never released with them, so such a state is refused, naming what
    it lacks, before any array is written."""
    from fasttrain.kernels import KernelEnv

    env = KernelEnv(game.SPEC, 3, "python", game.SPEC.make_params(), seed=1)
    env.reset(seed=1)
    for action in (5, 4, 4, 1, 5):
        env.arrays["actions"][:] = action
        env.step()
    saved = env.state_dict()
    names = [name for name, *_ in game.SCALARS]
    old = {name: array for name, array in saved.items() if name not in names}
    old["game"] = np.stack([saved[name] for name in names], axis=1)
    fresh = KernelEnv(game.SPEC, 3, "python", game.SPEC.make_params(), seed=2)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=rf"^state_dict lacks environment arrays '{names[0]}'"):
        fresh.load_state_dict(old)
    for name, array in fresh.state_dict().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)

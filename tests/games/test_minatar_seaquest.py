"""MinAtar Seaquest against the ``minatar`` package, step for step.

Our scalar functions run uncompiled beside ``minatar.Environment("seaquest")``. Every random
number MinAtar draws (the sticky-action ``rand()``; an enemy spawn's two ``rand()`` and its
``randint(1, 9)`` row; a diver spawn's ``rand()`` and row) is recorded and fed to our step in
place of our generator, so both play the same game: observation, reward and terminal must agree
at every step, resets included. The compiled backends are held to this Python reference by the
contract suite.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fasttrain.games import minatar_seaquest as game

minatar = pytest.importorskip("minatar", reason="the minatar package (test extra)")
G = game  # the scalars' indices


class RecordingRandom(np.random.RandomState):
    """MinAtar's generator, recording each number it draws (vector draws element by element)."""

    def __init__(self, seed):
        super().__init__(seed)
        self.draws = []

    def rand(self, *args):
        value = super().rand(*args)
        self.draws += [("rand", v, None) for v in np.atleast_1d(value).tolist()]
        return value

    def randint(self, low, high=None, size=None, **kwargs):
        value = super().randint(low, high, size, **kwargs)
        low, high = (0, low) if high is None else (low, high)
        self.draws += [("randint", v - low, high - low) for v in np.atleast_1d(value).tolist()]
        return value


class Fed:
    """Our game's ``rand_float`` / ``rand_int``, answering with MinAtar's recorded draws."""

    def __init__(self, draws):
        self.draws = draws

    def rand_float(self, rng, i):
        kind, value, _ = self.draws.pop(0)
        assert kind == "rand", "our step draws a float where MinAtar drew an integer"
        return value

    def rand_int(self, rng, i, n):
        kind, value, span = self.draws.pop(0)
        assert kind == "randint" and span == n, f"MinAtar drew {kind} over {span}, we over {n}"
        return value


class Ours:
    """One environment's state arrays and I/O buffers for the scalar functions."""

    def __init__(self, params):
        self.params = params
        self.state = {f.name: np.zeros((1, *f.shape(params)), dtype=f.dtype) for f in game.STATE}
        self.obs = np.zeros((1, game.NUM_CHANNELS, game.SIZE, game.SIZE), dtype=np.uint8)
        self.io = {
            "obs_flat": self.obs.reshape(1, -1),
            "rng": np.zeros(1, dtype=np.uint64),
            "actions": np.zeros(1, dtype=np.int64),
            "rewards": np.zeros(1, dtype=np.float32),
            "terminated": np.zeros(1, dtype=bool),
            "truncated": np.zeros(1, dtype=bool),
            "score": np.zeros(1, dtype=np.float32),
        }

    def call(self, fn):
        names = list(inspect.signature(fn).parameters)[1:]
        values = {**self.io, **self.state, **vars(self.params)}
        return fn(0, *(values[n] for n in names))

    def reset(self):
        self.call(game.reset_one)

    def step(self, action):
        self.io["actions"][0] = action
        self.call(game.step_one)
        return float(self.io["rewards"][0]), bool(self.io["terminated"][0])

    def copy_from(self, env):
        """MinAtar's game state into ours (the approach gymnax's tests use)."""
        e, g = env.env, self.state["game"][0]
        g[G.SUB_X], g[G.SUB_Y], g[G.SUB_OR] = e.sub_x, e.sub_y, e.sub_or
        g[G.OXYGEN], g[G.DIVER_COUNT] = e.oxygen, e.diver_count
        g[G.E_SPAWN_SPEED], g[G.E_SPAWN_TIMER] = e.e_spawn_speed, e.e_spawn_timer
        g[G.D_SPAWN_TIMER], g[G.MOVE_SPEED] = e.d_spawn_timer, e.move_speed
        g[G.RAMP_INDEX], g[G.SHOT_TIMER], g[G.SURFACE] = e.ramp_index, e.shot_timer, e.surface
        for name, items, count in (
            ("bullets", e.f_bullets, G.N_BULLETS),
            ("e_bullets", e.e_bullets, G.N_ENEMY_BULLETS),
            ("fish", e.e_fish, G.N_FISH),
            ("subs", e.e_subs, G.N_SUBS),
            ("divers", e.divers, G.N_DIVERS),
        ):
            g[count] = len(items)
            for k, item in enumerate(items):
                self.state[name][0, k] = [int(v) for v in item]
        self.state["last_action"][0] = env.last_action


def theirs(seed, sticky, ramping=True):
    env = minatar.Environment("seaquest", sticky_action_prob=sticky, difficulty_ramping=ramping)
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    return env


def observation(env):
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)  # (10, 10, C) -> (C, 10, 10)


def random_player(obs, generator):
    return int(generator.integers(6))


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


def play(
    policy, steps, seed, sticky=0.1, ramping=True, copy_state=False, minimal=False, tamper=None
):
    """Step MinAtar and our port side by side; returns counts of what was covered."""
    params = game.SeaquestParams(
        sticky_action_prob=sticky, minimal_action_set=minimal, ramping=ramping
    )
    env = theirs(seed, sticky, ramping)
    ours = Ours(params)
    fed = Fed(env.random.draws)
    generator = np.random.default_rng(seed)
    names = ("episodes", "kills", "rescued", "bonus", "surfaced", "no_air", "shot_at", "negative")
    covered = dict.fromkeys(("sticky", "max_ramp", "most_enemies", *names), 0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_float", fed.rand_float)
        patch.setattr(game, "rand_int", fed.rand_int)
        ours.reset()
        assert np.array_equal(ours.obs[0], observation(env)) and not fed.draws
        for step in range(steps):
            if copy_state:
                if tamper is not None:
                    tamper(env, step)
                ours.copy_from(env)
            action = policy(ours.obs[0], generator)
            e = env.env
            held, ramp = e.diver_count, e.ramp_index
            reward, terminal = env.act(action)
            covered["sticky"] += env.last_action != action
            covered["rescued"] += e.diver_count > held
            covered["bonus"] += e.diver_count == -1 and held == 6
            covered["surfaced"] += e.ramp_index > ramp or (
                e.sub_y == 0 and e.oxygen == 200 and held > 0
            )
            covered["no_air"] += terminal and e.oxygen <= 0
            covered["shot_at"] += len(e.e_bullets) > 0
            covered["negative"] += e.diver_count < 0
            covered["max_ramp"] = max(covered["max_ramp"], e.ramp_index)
            covered["most_enemies"] = max(covered["most_enemies"], len(e.e_fish) + len(e.e_subs))
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not fed.draws, where  # every MinAtar draw was used, in order
            g = ours.state["game"][0]
            assert (g[G.DIVER_COUNT], g[G.RAMP_INDEX], g[G.OXYGEN]) == (
                e.diver_count,
                e.ramp_index,
                e.oxygen,
            ), where
            covered["kills"] += reward == 1
            if terminal:
                covered["episodes"] += 1
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
                assert not fed.draws
    return covered


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(random_player, 2500, seed)
    assert covered["episodes"] >= 5 and covered["sticky"] > 100 and covered["shot_at"] > 0, covered


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(diver, 4000, seed)
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

    covered = play(diver, 3000, 4, copy_state=True, tamper=tamper)
    assert covered["bonus"] >= 3 and covered["negative"] > 0 and covered["no_air"] >= 1, covered
    assert covered["most_enemies"] >= 8 and covered["rescued"] >= 5, covered


def test_no_sticky_actions_and_no_ramping():
    covered = play(diver, 2000, 5, sticky=0.0, ramping=False, minimal=True)
    assert covered["sticky"] == 0 and covered["max_ramp"] == 0 and covered["kills"] > 5, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game.SeaquestParams(sticky_action_prob=1.0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_int", lambda rng, i, n: 0)
        patch.setattr(game, "rand_float", lambda rng, i: 0.9)
        ours.reset()
        ours.state["last_action"][0] = game.DOWN
        ours.reset()  # a new episode: the submarine on the surface
        ours.step(game.UP)  # always sticky: the dive repeats
    assert int(ours.state["game"][0, G.SUB_Y]) == 1


def test_params_are_checked():
    with pytest.raises(ValueError, match="sticky_action_prob"):
        game.SeaquestParams(sticky_action_prob=1.01)
    with pytest.raises(ValueError, match="max_episode_steps"):
        game.SeaquestParams(max_episode_steps=-1)


def test_render_text_shows_the_screen():
    ours = Ours(game.SeaquestParams())
    ours.reset()
    g = ours.state["game"][0]
    g[G.N_FISH], g[G.N_SUBS] = 1, 1
    ours.state["fish"][0, 0, :3] = (2, 3, 1)
    ours.state["subs"][0, 0, :3] = (7, 6, 0)
    state = {name: array[0] for name, array in ours.state.items()}
    lines = game.render_text(state, game.SeaquestParams()).splitlines()
    assert len(lines) == 13 and all(len(line) == 12 for line in lines[:12])
    assert lines[1] == "|.....<=...|" and lines[4] == "|..f.......|" and lines[7] == "|.......s..|"
    assert lines[12] == "oxygen 200  divers 0  ramp 0"

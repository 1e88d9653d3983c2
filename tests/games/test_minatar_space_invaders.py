"""MinAtar Space Invaders against the ``minatar`` package, step for step.

Our scalar functions run uncompiled beside ``minatar.Environment("space_invaders")``. The game is
deterministic; the only random number, the sticky-action ``rand()``, is recorded and fed to our
step in place of our generator, so both play the same game: observation, reward and terminal
must agree at every step, resets included. The compiled backends are held to this Python
reference by the contract suite.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fasttrain.games import minatar_space_invaders as game

minatar = pytest.importorskip("minatar", reason="the minatar package (test extra)")


class RecordingRandom(np.random.RandomState):
    """MinAtar's generator, recording each number it draws."""

    def __init__(self, seed):
        super().__init__(seed)
        self.draws = []

    def rand(self, *args):
        value = super().rand(*args)
        self.draws += np.atleast_1d(value).tolist()
        return value

    def randint(self, *args, **kwargs):
        raise AssertionError("MinAtar's Space Invaders draws no integers")


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
        e, s = env.env, self.state
        s["pos"][0], s["alien_dir"][0] = e.pos, e.alien_dir
        s["move_interval"][0], s["alien_move_timer"][0] = e.enemy_move_interval, e.alien_move_timer
        s["alien_shot_timer"][0], s["shot_timer"][0] = e.alien_shot_timer, e.shot_timer
        s["ramp_index"][0] = e.ramp_index
        s["aliens"][0] = e.alien_map.reshape(-1)
        s["f_bullets"][0] = e.f_bullet_map.reshape(-1)
        s["e_bullets"][0] = e.e_bullet_map.reshape(-1)
        s["last_action"][0] = env.last_action


def observation(env):
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)  # (10, 10, C) -> (C, 10, 10)


def random_player(obs, generator):
    return int(generator.integers(6))


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


def play(
    policy, steps, seed, sticky=0.1, ramping=True, copy_state=False, minimal=False, tamper=None
):
    """Step MinAtar and our port side by side; returns counts of what was covered."""
    params = game.SpaceInvadersParams(
        sticky_action_prob=sticky, minimal_action_set=minimal, ramping=ramping
    )
    env = minatar.Environment(
        "space_invaders", sticky_action_prob=sticky, difficulty_ramping=ramping
    )
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    ours = Ours(params)
    draws = env.random.draws
    generator = np.random.default_rng(seed)
    covered = {"episodes": 0, "kills": 0, "waves": 0, "sticky": 0, "top_ramp": 0, "shot": 0}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_float", lambda rng, i: draws.pop(0))
        ours.reset()
        assert np.array_equal(ours.obs[0], observation(env))
        for step in range(steps):
            if copy_state:
                if tamper is not None:
                    tamper(env, step)
                ours.copy_from(env)
            action = policy(ours.obs[0], generator)
            if minimal:  # the player's full-set action, in the minimal set
                action = game.MINIMAL_ACTIONS.index(action) if action in game.MINIMAL_ACTIONS else 0
                full = env.minimal_action_set()[action]
            else:
                full = action
            reward, terminal = env.act(full)
            covered["sticky"] += env.last_action != full
            covered["waves"] += reward > 0 and env.env.alien_map.sum() == 24  # a new block
            covered["top_ramp"] += env.env.enemy_move_interval == game.FASTEST_MOVE_INTERVAL
            covered["shot"] += terminal and env.env.e_bullet_map[9, env.env.pos] == 1
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not draws, where  # every MinAtar draw was used, in order
            assert int(ours.state["ramp_index"][0]) == env.env.ramp_index, where
            covered["kills"] += reward
            if terminal:
                covered["episodes"] += 1
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
    return covered


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(random_player, 2500, seed)
    assert covered["episodes"] >= 5 and covered["kills"] >= 20 and covered["sticky"] > 100


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(gunner, 4000, seed)
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

    covered = play(gunner, 2000, 4, copy_state=True, tamper=tamper)
    assert covered["episodes"] >= 10 and covered["kills"] >= 30, covered
    assert covered["waves"] >= 5 and covered["top_ramp"] > 0, covered


def test_minimal_action_set_no_sticky_actions_and_no_ramping():
    covered = play(gunner, 2500, 5, sticky=0.0, ramping=False, minimal=True)
    assert covered["sticky"] == 0 and covered["kills"] >= 100, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game.SpaceInvadersParams(sticky_action_prob=1.0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_float", lambda rng, i: 0.5)
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
    ours = Ours(game.SpaceInvadersParams())
    ours.reset()
    ours.state["f_bullets"][0, 5 * 10 + 5] = 1
    state = {name: array[0] for name, array in ours.state.items()}
    lines = game.render_text(state, game.SpaceInvadersParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[1:5] == ["|..<<<<<<..|"] * 4
    assert lines[6] == "|.....|....|" and lines[10] == "|.....A....|"

"""MinAtar Asterix against the ``minatar`` package, step for step.

Our scalar functions run uncompiled beside ``minatar.Environment("asterix")``. Every random
number MinAtar draws (the sticky-action ``rand()``, and a spawn's two ``rand()`` and its
``randint(free lanes)``) is recorded and fed to our step in place of our generator, so both
play the same game: observation, reward and terminal must agree at every step, resets included.
The compiled backends are held to this Python reference by the contract suite.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fasttrain.games import minatar_asterix as game

minatar = pytest.importorskip("minatar", reason="the minatar package (test extra)")


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
        e, s = env.env, self.state
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


def theirs(seed, sticky, ramping=True):
    env = minatar.Environment("asterix", sticky_action_prob=sticky, difficulty_ramping=ramping)
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    return env


def observation(env):
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)  # (10, 10, C) -> (C, 10, 10)


def random_player(obs, generator):
    return int(generator.integers(6))


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


def play(
    policy, steps, seed, sticky=0.1, ramping=True, copy_state=False, minimal=False, tamper=None
):
    """Step MinAtar and our port side by side; returns counts of what was covered."""
    params = game.AsterixParams(
        sticky_action_prob=sticky, minimal_action_set=minimal, ramping=ramping
    )
    env = theirs(seed, sticky, ramping)
    ours = Ours(params)
    fed = Fed(env.random.draws)
    generator = np.random.default_rng(seed)
    covered = {"episodes": 0, "gold": 0, "sticky": 0, "full": 0, "top_ramp": 0, "longest": 0}
    length = 0
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
            if minimal:  # the player's full-set action, in the minimal set
                action = game.MINIMAL_ACTIONS.index(action) if action in game.MINIMAL_ACTIONS else 0
                full = env.minimal_action_set()[action]
            else:
                full = action
            covered["full"] += env.env.spawn_timer == 0 and None not in env.env.entities
            reward, terminal = env.act(full)
            covered["sticky"] += env.last_action != full
            covered["top_ramp"] += env.env.spawn_speed == 1 and env.env.move_speed == 1
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not fed.draws, where  # every MinAtar draw was used, in order
            assert int(ours.state["ramp_index"][0]) == env.env.ramp_index, where
            covered["gold"] += reward
            length += 1
            if terminal:
                covered["episodes"] += 1
                covered["longest"] = max(covered["longest"], length)
                length = 0
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
                assert not fed.draws
    return covered


@pytest.mark.parametrize("seed", [0, 1])
def test_random_play_matches_minatar(seed):
    covered = play(random_player, 2500, seed)
    assert covered["episodes"] >= 10 and covered["gold"] >= 5 and covered["sticky"] > 100, covered


@pytest.mark.parametrize("seed", [2, 3])
def test_scripted_play_matches_minatar(seed):
    covered = play(collector, 4000, seed)
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

    covered = play(collector, 2400, 4, copy_state=True, tamper=tamper)
    assert covered["full"] >= 20 and covered["top_ramp"] > 0 and covered["episodes"] >= 5, covered


def test_minimal_action_set_no_sticky_actions_and_no_ramping():
    covered = play(collector, 2000, 5, sticky=0.0, ramping=False, minimal=True)
    assert covered["sticky"] == 0 and covered["gold"] >= 20 and covered["top_ramp"] == 0, covered


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game.AsterixParams(sticky_action_prob=1.0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_int", lambda rng, i, n: 0)
        patch.setattr(game, "rand_float", lambda rng, i: 0.9)
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
    ours = Ours(game.AsterixParams())
    ours.reset()
    ours.state["entities"][0, 2] = (1, 3, 1, 0)  # an enemy on row 3, column 3, moving right
    ours.state["entities"][0, 6] = (1, 9, 0, 1)  # gold on row 7 at the right edge, moving left
    state = {name: array[0] for name, array in ours.state.items()}
    lines = game.render_text(state, game.AsterixParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[4] == "|..-E......|" and lines[8] == "|.........$|"
    assert lines[6] == "|.....P....|" and lines[1] == "|..........|"

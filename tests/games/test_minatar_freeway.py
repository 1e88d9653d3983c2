"""MinAtar Freeway against the ``minatar`` package, step for step.

Our scalar functions run uncompiled beside ``minatar.Environment("freeway")``. Every random
number MinAtar draws (the sticky-action ``rand()``, and the cars' ``randint(1, 6, 8)`` speeds and
``rand(8)`` directions, one by one) is recorded and fed to our step in place of our generator,
so both play the same game: observation, reward and terminal must agree at every step, resets
included. The compiled backends are held to this Python reference by the contract suite.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fasttrain.games import minatar_freeway as game

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
        s["pos"][0], s["move_timer"][0] = e.pos, e.move_timer
        s["terminate_timer"][0] = e.terminate_timer
        for k, (x, _, timer, speed) in enumerate(e.cars):
            s["car_x"][0, k], s["car_timer"][0, k], s["car_speed"][0, k] = x, timer, speed
        s["last_action"][0] = env.last_action


def theirs(seed, sticky):
    env = minatar.Environment("freeway", sticky_action_prob=sticky)
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    return env


def observation(env):
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)  # (10, 10, C) -> (C, 10, 10)


def random_player(obs, generator):
    return int(generator.integers(6))


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


def play(policy, steps, seed, sticky=0.1, copy_state=False, minimal=False, tamper=None):
    """Step MinAtar and our port side by side; returns counts of what was covered."""
    params = game.FreewayParams(sticky_action_prob=sticky, minimal_action_set=minimal)
    env = theirs(seed, sticky)
    ours = Ours(params)
    fed = Fed(env.random.draws)
    generator = np.random.default_rng(seed)
    covered = {"episodes": 0, "crossings": 0, "hits": 0, "sticky": 0}
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
            if minimal:  # the scripted player's full-set action, in the minimal set
                action = game.MINIMAL_ACTIONS.index(action) if action in game.MINIMAL_ACTIONS else 0
                full = env.minimal_action_set()[action]
            else:
                full = action
            before = env.env.pos
            reward, terminal = env.act(full)
            covered["sticky"] += env.last_action != full
            covered["hits"] += env.env.pos == 9 and before < 9 and reward == 0
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not fed.draws, where  # every MinAtar draw was used, in order
            covered["crossings"] += reward
            if terminal:
                covered["episodes"] += 1
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
                assert not fed.draws
    return covered


def test_random_play_matches_minatar_through_the_time_limit():
    covered = play(random_player, 5100, 0)
    assert covered["episodes"] == 2 and covered["sticky"] > 300, covered


@pytest.mark.parametrize("seed", [1, 2])
def test_scripted_play_matches_minatar(seed):
    covered = play(climber, 2700, seed)
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

    covered = play(climber, 2000, 3, copy_state=True, tamper=tamper)
    assert covered["hits"] >= 20 and covered["crossings"] >= 3, covered


def test_minimal_action_set_and_no_sticky_actions():
    covered = play(climber, 1200, 4, sticky=0.0, minimal=True)
    assert covered["sticky"] == 0 and covered["crossings"] > 0


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    ours = Ours(game.FreewayParams(sticky_action_prob=1.0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_int", lambda rng, i, n: 0)
        patch.setattr(game, "rand_float", lambda rng, i: 0.9)
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
    ours = Ours(game.FreewayParams())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_int", lambda rng, i, n: i + 2)  # speed 3 everywhere
        patch.setattr(game, "rand_float", lambda rng, i: 0.9)  # rightwards
        ours.reset()
    state = {name: array[0] for name, array in ours.state.items()}
    lines = game.render_text(state, game.FreewayParams()).splitlines()
    assert len(lines) == 12 and all(len(line) == 12 for line in lines)
    assert lines[1] == "|..........|" and lines[10] == "|....C.....|"
    assert all(lines[1 + lane] == "|>........3|" for lane in range(1, 9))

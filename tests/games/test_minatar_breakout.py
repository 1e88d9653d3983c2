"""MinAtar Breakout against the ``minatar`` package, step for step.

Our scalar functions run uncompiled beside ``minatar.Environment("breakout")``. Every random
number MinAtar draws (the sticky-action ``rand()`` and the reset's ``randint(2)``) is recorded
and fed to our step in place of our own generator, so both play the same game: observation,
reward and terminal must agree at every step, resets included. The compiled backends are held
to this Python reference by the contract suite (tests/kernels).
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttrain.games import minatar_breakout as game

minatar = pytest.importorskip("minatar", reason="the minatar package (test extra)")


class RecordingRandom(np.random.RandomState):
    """MinAtar's generator, recording what each draw returned."""

    def __init__(self, seed):
        super().__init__(seed)
        self.draws = []

    def rand(self, *args):
        value = super().rand(*args)
        self.draws.append(("rand", value))
        return value

    def randint(self, *args, **kwargs):
        value = super().randint(*args, **kwargs)
        self.draws.append(("randint", value, args))
        return value


class Fed:
    """Our game's ``rand_float`` / ``rand_int``, answering with MinAtar's recorded draws."""

    def __init__(self, draws):
        self.draws = draws

    def rand_float(self, rng, i):
        kind, value = self.draws.pop(0)[:2]
        assert kind == "rand", "our step draws a float where MinAtar drew an integer"
        return value

    def rand_int(self, rng, i, n):
        kind, value, args = self.draws.pop(0)
        assert kind == "randint" and args == (n,), f"MinAtar drew randint{args}, we rand_int({n})"
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
        import inspect

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
        for name in ("ball_x", "ball_y", "ball_dir", "last_x", "last_y", "pos"):
            s[name][0] = getattr(e, name)
        s["strike"][0] = e.strike
        s["bricks"][0] = e.brick_map.reshape(-1)
        s["last_action"][0] = env.last_action


def theirs(seed, sticky):
    env = minatar.Environment("breakout", sticky_action_prob=sticky)
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    return env


def observation(env):
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)  # (10, 10, C) -> (C, 10, 10)


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


def play(policy, steps, seed, sticky=0.1, copy_state=False, minimal=False, tamper=None):
    """Step MinAtar and our port side by side; returns counts of what was covered.
    ``copy_state``: copy MinAtar's state into ours before each step, after ``tamper(env,
    step)`` may have changed it (to reach rare states)."""
    params = game.BreakoutParams(sticky_action_prob=sticky, minimal_action_set=minimal)
    env = theirs(seed, sticky)
    ours = Ours(params)
    fed = Fed(env.random.draws)
    generator = np.random.default_rng(seed)
    covered = {"episodes": 0, "bricks": 0, "refills": 0, "sticky": 0}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_float", fed.rand_float)
        patch.setattr(game, "rand_int", fed.rand_int)
        ours.reset()
        assert np.array_equal(ours.obs[0], observation(env))
        for step in range(steps):
            if copy_state:
                if tamper is not None:
                    tamper(env, step)
                ours.copy_from(env)
            action = policy(ours.obs[0], generator)
            if minimal:
                action %= 3
                full = env.minimal_action_set()[action]
            else:
                full = action
            before = env.env.brick_map.sum()
            reward, terminal = env.act(full)
            covered["sticky"] += env.last_action != full
            covered["refills"] += env.env.brick_map.sum() > before
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not fed.draws, where  # every MinAtar draw was used, in order
            covered["bricks"] += reward
            if terminal:
                covered["episodes"] += 1
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
                assert not fed.draws
    return covered


def random_player(obs, generator):
    return int(generator.integers(6))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_play_matches_minatar(seed):
    covered = play(random_player, 3000, seed)
    assert covered["episodes"] >= 50 and covered["sticky"] > 100


@pytest.mark.parametrize("seed", [3, 4])
def test_scripted_play_matches_minatar(seed):
    covered = play(chase, 6000, seed)
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

    covered = play(chase, 4000, 5, copy_state=True, tamper=tamper)
    assert covered["refills"] >= 10 and covered["episodes"] >= 3, covered


def test_minimal_action_set_and_no_sticky_actions():
    covered = play(chase, 2000, 6, sticky=0.0, minimal=True)
    assert covered["sticky"] == 0 and covered["bricks"] > 0


def test_sticky_action_carries_into_the_next_episode():
    """MinAtar's quirk, kept: the previous episode's last action can repeat at a new start."""
    params = game.BreakoutParams(sticky_action_prob=1.0)
    ours = Ours(params)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(game, "rand_int", lambda rng, i, n: 0)
        patch.setattr(game, "rand_float", lambda rng, i: 0.5)
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

"""A MinAtar port against the ``minatar`` package, step for step: what the five parity tests share.

Our scalar functions run uncompiled beside ``minatar.Environment``. Every random number MinAtar
draws is recorded (vector draws element by element) and fed to our step in place of our own
generator (``rand_float`` / ``rand_int`` in the port and in ``_minatar.py``), so both play
the same game: observation, reward and terminal must agree at every step, resets included, and
every MinAtar draw must be used, in order. A game's test file keeps its part: its policies, how
its coverage is counted (``act``), how MinAtar's state is copied into ours (``copy_from``) and
what else must agree (``check``). The compiled backends are held to this Python reference by the
contract suite (tests/fasttrain/games/test_contract.py).
"""

from __future__ import annotations

import contextlib
from collections import Counter

import numpy as np
import pytest

from fasttrain.games import _minatar
from fasttrain.kernels import KernelEnv

minatar = pytest.importorskip("minatar", reason="the minatar package (test extra)")


class RecordingRandom(np.random.RandomState):
    """MinAtar's generator, recording each number it draws: ``(kind, value, span)``."""

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


@contextlib.contextmanager
def drawing(game, rand_float, rand_int=None):
    """Within: the port ``game`` (and the shared MinAtar code) draw from these functions."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (game, _minatar):
            for name, fn in (("rand_float", rand_float), ("rand_int", rand_int)):
                if fn is not None and hasattr(module, name):
                    patch.setattr(module, name, fn)
        yield


class Ours:
    """One environment of the port, its scalar functions called directly (uncompiled)."""

    def __init__(self, game, params):
        self.game = game
        self.env = KernelEnv(game.SPEC, 1, "python", params)
        self.state = self.env.state  # name -> array (1, ...)
        self.obs = self.env.arrays["obs"]  # (1, C, 10, 10)

    def reset(self):
        self.game.reset_one(0, *self.env.objects())

    def step(self, action) -> tuple[float, bool]:
        """One step with ``action``: the reward and whether it terminated."""
        self.env.arrays["actions"][0] = action
        self.game.step_one(0, *self.env.objects())
        return float(self.env.arrays["rewards"][0]), bool(self.env.arrays["terminated"][0])

    def screen(self) -> dict:
        """The state of the environment, for ``render_text``."""
        return {name: array[0] for name, array in self.state.items()}


def observation(env):
    """MinAtar's screen as ours: ``(10, 10, C)`` -> ``(C, 10, 10)`` uint8."""
    return np.moveaxis(env.state(), 2, 0).astype(np.uint8)


def random_player(obs, generator):
    """Any of the six actions, uniformly."""
    return int(generator.integers(6))


def play(
    game,
    policy,
    steps,
    seed,
    *,
    sticky=0.1,
    minimal=False,
    ramping=None,
    act=None,
    check=None,
    copy_from=None,
    tamper=None,
):
    """Step MinAtar's ``game`` and our port side by side; returns counts of what was covered.

    Args:
        game: the port's module (``fasttrain.games.minatar_breakout``).
        policy: ``policy(obs, generator) -> action`` in the full set, from our observation.
        steps: steps to play; episodes that end restart on both sides.
        seed: seeds MinAtar's generator and the policy's.
        sticky: ``sticky_action_prob`` on both sides.
        minimal: play the minimal action set (the policy's action, else no-op).
        ramping: MinAtar's ``difficulty_ramping`` (None for a game without it).
        act: ``act(env, full, covered) -> (reward, terminal)``: MinAtar's step for the full-set
            action, counting into ``covered`` what it covered (default: ``env.act``).
        check: ``check(env, ours, where)``: what else must agree after each step.
        copy_from: ``copy_from(env, state)``: MinAtar's state into ours before each step,
            after ``tamper(env, step)`` (if given) may have changed it, to reach rare states.

    Returns:
        The counts: ``episodes``, ``sticky`` (steps whose action stuck) and what ``act``
        counted.
    """
    options = {} if ramping is None else {"ramping": ramping}
    env = minatar.Environment(
        game.SPEC.name.removeprefix("minatar-"),
        sticky_action_prob=sticky,
        **({} if ramping is None else {"difficulty_ramping": ramping}),
    )
    env.seed(seed)
    env.random = env.env.random = RecordingRandom(seed)
    env.reset()
    params = game.SPEC.make_params(sticky_action_prob=sticky, minimal_action_set=minimal, **options)
    ours = Ours(game, params)
    fed = Fed(env.random.draws)
    generator = np.random.default_rng(seed)
    covered = Counter()
    with drawing(game, fed.rand_float, fed.rand_int):
        ours.reset()
        assert np.array_equal(ours.obs[0], observation(env)) and not fed.draws
        for step in range(steps):
            if copy_from is not None:
                if tamper is not None:
                    tamper(env, step)
                copy_from(env, ours.state)
            action = policy(ours.obs[0], generator)
            full = action
            if minimal:  # the player's full-set action, in the minimal set
                action = game.MINIMAL_ACTIONS.index(action) if action in game.MINIMAL_ACTIONS else 0
                full = env.minimal_action_set()[action]
            reward, terminal = act(env, full, covered) if act else env.act(full)
            covered["sticky"] += env.last_action != full
            got_reward, got_terminal = ours.step(action)
            where = f"seed {seed} step {step}"
            assert got_reward == reward, where
            assert got_terminal == terminal, where
            assert np.array_equal(ours.obs[0], observation(env)), where
            assert not fed.draws, where  # every MinAtar draw was used, in order
            if check is not None:
                check(env, ours, where)
            if terminal:
                covered["episodes"] += 1
                env.reset()
                ours.reset()
                assert np.array_equal(ours.obs[0], observation(env)), where
                assert not fed.draws
    return covered

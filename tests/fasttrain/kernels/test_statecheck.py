"""load_state_dict refuses every value its game could not have produced, before any is written:
the runtime's buffers (rng, actions, counters, bools, floats) and the game's declared bounds and
invariants (``Field.low``/``high``, ``GameSpec.check_state``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fasttrain.kernels import Field, KernelEnv
from fasttrain.kernels.statecheck import StateError, state_problem
from tests.fasttrain.kernels.test_env import DIAL


def _bounded(**extra):
    """DIAL whose ``count`` is declared in ``[0, length]`` and whose history sums below 1e6."""
    count = Field("count", lambda p: (), np.int64, "steps", low=0, high=lambda p: p.length)
    state = (count, *DIAL.state[1:])

    def check_state(state, params):
        bad = np.abs(state["history"]).sum(axis=1) >= 1e6
        return f"env {int(np.flatnonzero(bad)[0])}: history too large" if bad.any() else None

    return dataclasses.replace(DIAL, state=state, check_state=check_state, **extra)


@pytest.fixture
def env():
    env = KernelEnv(_bounded(), 3, "python", DIAL.make_params(length=7), seed=1)
    env.reset()
    env.arrays["actions"][...] = 2
    env.step()
    return env


def state_refusal(env, change) -> str:
    """Load ``env.state_dict()`` with ``change(state)`` applied to copies of its arrays: the
    one-line ``StateError``, after checking that nothing was written (the games' tests use it)."""
    before = env.state_dict()
    state = {name: array.copy() for name, array in before.items()}
    change(state)
    with pytest.raises(StateError) as info:
        env.load_state_dict(state)
    for name, array in env.state_dict().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)
    message = str(info.value)
    assert "\n" not in message
    return message


def _refusal(env, name, value, index=(1,)):
    def change(state):
        state[name][index] = value

    return state_refusal(env, change)


def test_a_state_the_game_produced_loads(env):
    saved = env.state_dict()
    env.arrays["actions"][...] = 1
    env.step()
    env.load_state_dict(saved)
    for key, array in env.state_dict().items():
        np.testing.assert_array_equal(array, saved[key], err_msg=key)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("rng", 0, "env 1: rng = 0, the generator's fixed point"),
        ("actions", 3, "row 1: actions = 3; valid: 0 to 2"),
        ("actions", -1, "row 1: actions = -1; valid: 0 to 2"),
        ("ep_length", -4, "row 1: ep_length = -4; valid: 0 to 1073741824"),
        ("done_count", -1, "row 1: done_count = -1"),
        ("ep_return", np.nan, "row 1: ep_return = nan; valid: finite"),
        ("rewards", np.inf, "row 1: rewards = inf; valid: finite"),
        ("obs", np.nan, "row 1: obs = nan"),
        ("count", 8, "env 1: count = 8; valid: 0 to 7"),
        ("count", -1, "env 1: count = -1; valid: 0 to 7"),
        ("history", np.nan, "env 1: history = nan; valid: finite"),
        ("history", 2e6, "env 1: history too large"),
        # a counter at its dtype's edge would wrap round at its next increment
        ("ep_length", 2**31 - 1, "row 1: ep_length = 2147483647; valid: 0 to 1073741824"),
        (
            "done_count",
            2**63 - 1,
            "row 1: done_count = 9223372036854775807; valid: 0 to 4611686018427387904",
        ),
    ],
)
def test_a_value_the_game_cannot_produce_is_refused_in_one_line(env, name, value, says):
    message = _refusal(env, name, value)
    assert message.startswith("game 'dial' state, ") and says in message
    assert "\n" not in message


def test_a_bool_byte_other_than_0_or_1_is_refused(env):
    state = env.state_dict()
    state["terminated"] = state["terminated"].copy()
    state["terminated"].view(np.uint8)[2] = 7
    with pytest.raises(StateError, match="row 2: terminated holds byte 7; a bool is 0 or 1"):
        env.load_state_dict(state)


def test_bounds_follow_the_params(env):
    state = env.state_dict()
    state["count"] = np.full_like(state["count"], 7)
    assert state_problem(env.spec, env.params, state, env.num_actions) is None
    short = dataclasses.replace(env.params, length=6)
    assert "count = 7; valid: 0 to 6" in state_problem(env.spec, short, state, env.num_actions)

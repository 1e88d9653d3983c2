"""``assert_backends_agree`` passes on agreeing backends and names the first difference."""

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from fasttrain.kernels import Field, GameSpec, assert_backends_agree, get_backend


@dataclass(frozen=True)
class CountParams:
    episode_length: int = 5
    """steps per episode"""


def reset_one(i, io, s, p):
    s.count[i] = 0
    io.obs[i, 0] = 0.0


def step_one(i, io, s, p):
    s.count[i] += 1
    io.obs[i, 0] = s.count[i] + io.actions[i]
    io.rewards[i] = io.actions[i]
    io.terminated[i] = s.count[i] == p.episode_length
    io.truncated[i] = False


def step_one_off_at_three(i, io, s, p):
    step_one(i, io, s, p)
    if s.count[i] == 3:
        io.obs[i, 0] += 1.0


COUNT = GameSpec(
    name="count_for_checker",
    params_cls=CountParams,
    state=(Field("count", lambda p: (), np.int64, "() steps taken this episode"),),
    obs_shape=lambda p: (1,),
    obs_dtype=np.float32,
    num_actions=3,
    reset_one=reset_one,
    step_one=step_one,
    render_text=lambda state, params: str(state["count"]),
)


def test_agreeing_backends_pass_and_count_the_episodes():
    episodes = assert_backends_agree(COUNT, ["python", "cpu"], num_envs=6, steps=12, seed=3)
    assert episodes == 6 * 2  # every env ends an episode at steps 5 and 10
    params = COUNT.make_params(episode_length=4)
    assert assert_backends_agree(COUNT, ["cpu", "python"], 6, 12, params=params) == 6 * 3


def test_a_backend_that_differs_is_named_with_the_step_and_the_array(monkeypatch):
    cpu = get_backend("cpu")
    compile_right = cpu.compile
    broken = dataclasses.replace(COUNT, name="count_off_at_three", step_one=step_one_off_at_three)
    monkeypatch.setattr(cpu, "compile", lambda spec: compile_right(broken))
    with pytest.raises(AssertionError, match="count_for_checker: cpu vs python, 'obs', step 2"):
        assert_backends_agree(COUNT, ["python", "cpu"], num_envs=4, steps=5)


def test_one_backend_is_refused():
    with pytest.raises(ValueError, match="two or more backends"):
        assert_backends_agree(COUNT, ["cpu"], 4, 5)

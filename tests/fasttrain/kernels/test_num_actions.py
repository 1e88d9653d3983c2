"""A number of actions set by the params (``GameSpec.num_actions`` as a function), as MinAtar's
``minimal_action_set`` does: the count per params, the action check, ``set_params`` and a
curriculum refusing to change it, and a bad count failing in one line.

A tiny game defined here: each step rewards ``action + bonus`` and observes the action; it
takes 6 actions, or 3 with ``minimal_action_set``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import tomllib
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain import games
from fasttrain.cli import main
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.kernels import GameSpec, KernelEnv, assert_backends_agree
from fasttrain.kernels.env import shape_params

BACKENDS = ["python", "cpu"]


@dataclass(frozen=True)
class PickParams:
    minimal_action_set: bool = False
    """3 actions instead of 6"""
    bonus: float = 0.0
    """added to every reward (may change between steps)"""


def pick_reset(i, io, s, p):
    io.obs[i, 0] = 0.0


def pick_step(i, io, s, p):
    io.obs[i, 0] = io.actions[i]
    io.rewards[i] = io.actions[i] + p.bonus
    io.terminated[i] = False
    io.truncated[i] = False


PICK = GameSpec(
    name="test_pick_actions",
    params_cls=PickParams,
    state=(),
    obs_shape=lambda p: (1,),
    obs_dtype=np.float32,
    num_actions=lambda p: 3 if p.minimal_action_set else 6,
    reset_one=pick_reset,
    step_one=pick_step,
    render_text=lambda state, params: "",
)
# the same game with a constant count
PICK_FIXED = dataclasses.replace(PICK, name="test_pick_actions_fixed", num_actions=4)


@pytest.fixture
def registered():
    """PICK and PICK_FIXED in the game registry for one test."""
    for spec in (PICK, PICK_FIXED):
        games.register(spec)
    yield
    for spec in (PICK, PICK_FIXED):
        games._REGISTRY.pop(spec.name, None)


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------- the count


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("minimal, count", [(False, 6), (True, 3)])
def test_make_gives_the_count_of_the_params(registered, backend, minimal, count):
    env = fasttrain.make(PICK.name, 4, backend, minimal_action_set=minimal)
    assert env.num_actions == count
    assert env._core.num_actions == count
    assert f"num_actions={count})" in repr(env)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("minimal, count", [(False, 6), (True, 3)])
def test_actions_below_the_count_step_and_the_others_are_refused_in_one_line(
    registered, backend, minimal, count
):
    env = fasttrain.make(PICK.name, 3, backend, minimal_action_set=minimal)
    _, rewards, _, _ = env.step(torch.tensor([0, count - 1, count // 2]))
    assert rewards.tolist() == [0.0, count - 1, count // 2]
    for bad in (count, 5 if minimal else 6, -1):
        with pytest.raises(ValueError) as excinfo:
            env.step(torch.tensor([1, bad, 2]))
        assert one_line(excinfo) == (
            f"action {bad} for env 1 is out of range: game {PICK.name!r} takes actions "
            f"0..{count - 1}; no env was stepped"
        )
        assert env.obs[:, 0].tolist() == [0.0, count - 1, count // 2]  # not stepped


@pytest.mark.parametrize("minimal, count", [(False, 6), (True, 3)])
def test_the_host_side_check_uses_the_count_of_the_params(monkeypatch, minimal, count):
    """The check backends that cannot check in the kernel (cuda) make before a launch."""
    env = KernelEnv(PICK, 2, "python", PICK.make_params(minimal_action_set=minimal))
    env.reset(seed=0)
    monkeypatch.setattr(env.backend, "validates_in_kernel", False)
    env.arrays["actions"][:] = [count - 1, count]
    assert env.step() == 1
    env.arrays["actions"][:] = [count - 1, 0]
    assert env.step() == -1


def test_backends_agree_with_a_reduced_action_set():
    params = PICK.make_params(minimal_action_set=True, bonus=0.5)
    assert assert_backends_agree(PICK, BACKENDS, 3, 20, seed=1, params=params) == 0


# ------------------------------------------------------------------------------- set_params


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_params_changing_the_count_is_refused_in_one_line(registered, backend):
    env = fasttrain.make(PICK.name, 2, backend)
    params = env.params
    with pytest.raises(ValueError) as excinfo:  # with a param that may change beside it
        env.set_params(minimal_action_set=True, bonus=1.0)
    assert one_line(excinfo) == (
        f"game {PICK.name!r} parameter 'minimal_action_set' sets buffer shapes and cannot "
        "change after the environments are made"
    )
    assert env.params is params and env._core.params is params and env.num_actions == 6
    env.step(torch.tensor([5, 0]))  # still 6 actions, and the old bonus
    assert env.rewards.tolist() == [5.0, 0.0]
    env.set_params(bonus=1.0)  # a param that leaves the count alone
    env.step(torch.tensor([5, 0]))
    assert env.rewards.tolist() == [6.0, 1.0] and env.num_actions == 6


def test_shape_params_names_the_param_that_changes_the_count():
    base = PICK.make_params()
    both = PICK.make_params(minimal_action_set=True, bonus=2.0)
    assert shape_params(PICK, base, both) == ["minimal_action_set"]
    assert shape_params(PICK, base, PICK.make_params(bonus=2.0)) == []
    # a constant count: the same param changes nothing that is fixed
    assert shape_params(PICK_FIXED, base, both) == []


def test_a_curriculum_stage_changing_the_count_is_refused_in_one_line(registered):
    text = (
        f"[game]\nname = '{PICK.name}'\n"
        "[[curriculum.stage]]\nparams = { bonus = 1.0 }\npromote_at = 1.0\n"
        "[[curriculum.stage]]\nparams = { minimal_action_set = true }\n"
    )
    with pytest.raises(ConfigError) as excinfo:
        cfg.from_dict(tomllib.loads(text))
    message = one_line(excinfo)
    assert message.startswith("curriculum stage 2: ")
    assert "parameter 'minimal_action_set' sets buffer shapes" in message


# ------------------------------------------------------------------------------- bad counts


@pytest.mark.parametrize("result", [0, -2, 2.0, True, "3", None])
def test_a_bad_count_from_the_function_fails_in_one_line_naming_the_game(result):
    spec = dataclasses.replace(PICK, name="bad_pick", num_actions=lambda p: result)
    with pytest.raises(ValueError) as excinfo:
        KernelEnv(spec, 2, "python", spec.make_params())
    assert one_line(excinfo) == f"game 'bad_pick': num_actions must be an int >= 1, got {result!r}"
    with pytest.raises(ValueError, match="game 'bad_pick': num_actions must be an int >= 1"):
        spec.actions(spec.make_params())


def test_a_bad_count_only_for_some_params_is_refused_when_made_with_them(registered):
    spec = dataclasses.replace(PICK, name="half_pick", num_actions=lambda p: 0 if p.bonus else 2)
    games.register(spec)
    try:
        assert fasttrain.make(spec.name, 2, "python").num_actions == 2
        with pytest.raises(ValueError) as excinfo:
            fasttrain.make(spec.name, 2, "python", bonus=1.0)
        assert one_line(excinfo) == "game 'half_pick': num_actions must be an int >= 1, got 0"
    finally:
        games._REGISTRY.pop(spec.name, None)


# ------------------------------------------------------------------------------- a constant


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_constant_count_is_unchanged(registered, backend):
    env = fasttrain.make(PICK_FIXED.name, 2, backend, minimal_action_set=True)
    assert env.num_actions == 4
    env.step(torch.tensor([3, 0]))
    assert env.rewards.tolist() == [3.0, 0.0]
    with pytest.raises(ValueError, match=r"takes actions 0\.\.3; no env was stepped"):
        env.step(torch.tensor([4, 0]))
    env.set_params(minimal_action_set=False, bonus=1.0)  # sets nothing fixed for this game
    env.step(torch.tensor([3, 0]))
    assert env.rewards.tolist() == [4.0, 1.0] and env.num_actions == 4


def test_the_games_table_shows_the_count_for_the_default_params(registered, monkeypatch):
    monkeypatch.setattr(games, "names", lambda: [PICK.name, PICK_FIXED.name])
    result = CliRunner().invoke(main, ["games"])
    assert result.exit_code == 0, result.output
    table = result.output.split("\n\n")[0]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:]}
    assert rows[PICK.name] == ["float32", "1", "6", "(a", "param)", "1"]
    assert rows[PICK_FIXED.name] == ["float32", "1", "4", "1"]

"""Retargeting and launcher naming: source digests, argument binding, parameter checks."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import fasttrain.games.snake as snake_module
from fasttrain.games.snake import SPEC, SnakeParams
from fasttrain.kernels.build import source_digest


def _load_variant(tmp_path, monkeypatch, name, edit):
    """Import a copy of snake.py with ``edit(text)`` applied, under a fresh module name."""
    text = inspect.getsource(snake_module)
    new_text = edit(text)
    path = tmp_path / f"{name}.py"
    path.write_text(new_text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _replace_once(old, new):
    def edit(text):
        assert text.count(old) == 1, old
        return text.replace(old, new)

    return edit


def test_source_digest_is_stable_across_processes():
    code = (
        "from fasttrain.games.snake import SPEC\n"
        "from fasttrain.kernels.build import source_digest\n"
        "print(source_digest(SPEC, 'cpu'), source_digest(SPEC, 'python'))\n"
    )
    # a different string-hash seed than this process: digests must not depend on it
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == [source_digest(SPEC, "cpu"), source_digest(SPEC, "python")]


def test_source_digest_depends_on_backend_tag():
    digests = {source_digest(SPEC, tag) for tag in ("", "python", "cpu", "cpu {'inline': 'never'}")}
    assert len(digests) == 4


def test_source_digest_follows_sources_and_constants(tmp_path, monkeypatch):
    same = _load_variant(tmp_path, monkeypatch, "snake_same", lambda text: text)
    assert source_digest(same.SPEC, "cpu") == source_digest(SPEC, "cpu")  # location is not hashed
    # a callee of step_one (move_head), a constant reset_one reads, step_one's own body
    edits = {
        "snake_callee": _replace_once("return r - 1, c", "return r - 2, c"),
        "snake_const": _replace_once("START_LENGTH = 3", "START_LENGTH = 4"),
        "snake_step": _replace_once("reward = p.reward_death", "reward = 2 * p.reward_death"),
    }
    digests = {source_digest(SPEC, "cpu")}
    for name, edit in edits.items():
        digests.add(source_digest(_load_variant(tmp_path, monkeypatch, name, edit).SPEC, "cpu"))
    assert len(digests) == 1 + len(edits)


def test_unknown_step_argument_names_valid_ones():
    def step_one(i, io, s, p):
        io.rewards[i] = s.body[i, 0] * p.height + s.speed_of_light[i]

    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=step_one)
    message = str(excinfo.value)
    assert "speed_of_light" in message and "\n" not in message
    for valid in ("obs_flat", "rewards", "rng", "body", "grid", "height", "reward_fruit"):
        assert valid in message


def _helper_reading_a_param_the_game_lacks(i, s, p):
    return s.length[i] * p.depth


def _step_calling_that_helper(i, io, s, p):
    io.rewards[i] = _helper_reading_a_param_the_game_lacks(i, s, p)


def test_an_unknown_name_in_a_helper_is_found_through_the_call_graph():
    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=_step_calling_that_helper)
    message = str(excinfo.value)
    assert message.startswith("snake._helper_reading_a_param_the_game_lacks reads p.depth")
    assert "valid:" in message and "max_episode_steps" in message and "\n" not in message


def test_a_game_written_the_old_way_gets_one_line_saying_how_to_write_it_now():
    """Before the objects, a game function took one positional argument per array and param."""

    def step_one(i, actions, obs_flat, rewards, terminated, truncated, body, height):
        rewards[i] = actions[i]

    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=step_one)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith("snake.step_one must take the env index `i` first, then the objects")
    assert "def step_one(i, io, s, p)" in message
    assert (
        "it takes (i, actions, obs_flat, rewards, terminated, truncated, body, height)" in message
    )


def test_game_functions_must_take_i_first_and_names_must_not_clash():
    def reset_one(env, io, s, p):
        pass

    with pytest.raises(ValueError, match="`i` first"):
        dataclasses.replace(SPEC, reset_one=reset_one)

    @dataclasses.dataclass(frozen=True)
    class ClashParams:
        grid: int = 1  # also a state array

    with pytest.raises(ValueError, match=r"used twice: \['grid'\]"):
        dataclasses.replace(SPEC, params_cls=ClashParams)


def test_make_params_accepts_valid_overrides():
    params = SPEC.make_params(height=7, width=np.int32(9), reward_fruit=2, reward_step=-0.5)
    assert isinstance(params, SnakeParams)
    assert (params.height, params.width, params.reward_fruit, params.reward_step) == (7, 9, 2, -0.5)
    assert params.max_steps_without_food == SnakeParams().max_steps_without_food


def test_make_params_rejects_unknown_keys_naming_valid_ones():
    with pytest.raises(ValueError) as excinfo:
        SPEC.make_params(height=6, heigth=6)
    message = str(excinfo.value)
    assert "heigth" in message
    for field in dataclasses.fields(SnakeParams):
        assert field.name in message


@pytest.mark.parametrize(
    "key, value",
    [
        ("height", 8.0),
        ("height", "8"),
        ("height", True),
        ("reward_fruit", "1"),
        ("reward_fruit", None),
        ("max_episode_steps", 1.5),
    ],
)
def test_make_params_rejects_wrong_types(key, value):
    with pytest.raises(TypeError) as excinfo:
        SPEC.make_params(**{key: value})
    message = str(excinfo.value)
    assert key in message
    assert type(getattr(SnakeParams(), key)).__name__ in message


def test_params_reject_invalid_values():
    with pytest.raises(ValueError, match="at least 3x3"):
        SPEC.make_params(height=2)
    with pytest.raises(ValueError, match=">= 0"):
        SPEC.make_params(max_steps_without_food=-1)

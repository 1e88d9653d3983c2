"""Reading settings: TOML files read safely, --set items parsed, tables merged, values typed."""

import math
import os

import pytest

from fasttrain.config.read import (
    MAX_CONFIG_BYTES,
    check_value,
    load_toml,
    merge,
    parse_set,
    user_layers,
)
from fasttrain.errors import ConfigError


@pytest.mark.parametrize("item", ["ppo.learning_rate", "learning_rate=1", "=3", "ppo..x=1"])
def test_bad_set_syntax(item):  # moved from test_config.py with parse_set
    with pytest.raises(ConfigError, match="--set"):
        parse_set([item])


def test_set_items_are_typed_by_toml_and_bare_words_stay_strings():
    tree = parse_set(
        ["ppo.learning_rate=3e-4", "run.device=cpu", "game.snake.height=8", "a.b=true"]
    )
    assert tree == {
        "ppo": {"learning_rate": 3e-4},
        "run": {"device": "cpu"},
        "game": {"snake": {"height": 8}},
        "a": {"b": True},
    }
    with pytest.raises(ConfigError, match="one line"):
        parse_set(["ppo.gamma=0.9\n[run]"])
    with pytest.raises(ConfigError, match="--set game.snake.ppo.x: ppo is a value, not a section"):
        parse_set(["game.snake.ppo=1", "game.snake.ppo.x=2"])


def test_merge_is_recursive_and_the_second_wins():
    base = {"ppo": {"gamma": 0.9, "num_envs": 8}, "run": {"seed": 1}}
    assert merge(base, {"ppo": {"gamma": 0.5}, "log": {}}) == {
        "ppo": {"gamma": 0.5, "num_envs": 8},
        "run": {"seed": 1},
        "log": {},
    }
    assert base["ppo"]["gamma"] == 0.9  # the inputs are left as they were


def test_check_value_types_by_the_default():
    assert check_value("x", 1.0, 3) == 3.0 and isinstance(check_value("x", 1.0, 3), float)
    assert check_value("x", "a", "b", ("a", "b")) == "b"
    for default, value, words in [
        (1, True, "x must be int, got True"),  # a bool is no int here
        (1, 1.5, "x must be int"),
        (True, 1, "x must be bool"),
        (1.0, math.inf, "x must be a finite number"),
        ("a", "c", "x must be one of a, b; got 'c'"),
    ]:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            check_value("x", default, value, ("a", "b") if default == "a" else None)


@pytest.mark.posix
def test_a_file_that_is_no_config_is_refused_before_it_is_read(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a named pipe|not a regular file"):
        load_toml(fifo)
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="a config file is at most"):
        load_toml(huge)
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "nope.toml")


def test_user_layers_are_the_file_then_set(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[ppo]\ngamma = 0.9\n")
    assert user_layers(path, ["ppo.gamma=0.5"]) == [
        (f"--config {path}", {"ppo": {"gamma": 0.9}}),
        ("--set", {"ppo": {"gamma": 0.5}}),
    ]
    assert user_layers() == [("--set", {})]

"""fasttrain.games: the registry finds built-in games by name, imports each once it is
asked for, and takes a user's game without letting it replace another or name a file outside
the cache."""

import dataclasses
import re

import pytest

from fasttrain import games
from fasttrain.kernels import GameSpec
from tests.cli import ROOT


def game_modules() -> list[str]:
    """The built-in games, read from their files (a module of ``fasttrain/games/`` that defines
    a ``SPEC``): what the registry must list, without a second list to keep."""
    folder = ROOT / "fasttrain" / "games"
    found = [p for p in folder.glob("*.py") if re.search(r"^SPEC = ", p.read_text(), re.M)]
    return sorted(p.stem.replace("minatar_", "minatar-") for p in found)


BUILTIN = game_modules()


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, put back after the test."""
    monkeypatch.setattr(games, "_REGISTRY", dict(games._REGISTRY))
    return games._REGISTRY


def test_names_are_the_built_in_games_sorted():
    assert len(BUILTIN) >= 8 and "snake" in BUILTIN  # the files were found
    assert [name for name in games.names() if name in BUILTIN] == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_each_built_in_game_is_its_modules_spec_and_stays_one_object(name):
    import importlib

    spec = games.get(name)
    assert isinstance(spec, GameSpec) and spec.name == name
    assert spec is importlib.import_module(games._BUILTIN[name]).SPEC
    assert games.get(name) is spec


def test_an_unknown_game_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError) as excinfo:
        games.get("snaek")
    assert str(excinfo.value) == f"unknown game 'snaek'; valid: {', '.join(games.names())}"


def test_a_users_game_is_registered_once_and_may_not_take_another_name(registry):
    snake = games.get("snake")
    mine = dataclasses.replace(snake, name="my_snake")
    assert games.register(mine) is mine
    assert games.get("my_snake") is mine and "my_snake" in games.names()
    assert games.register(mine) is mine  # the same spec again: nothing changes
    other = dataclasses.replace(snake, name="my_snake")
    with pytest.raises(ValueError, match="^a game named 'my_snake' is already registered$"):
        games.register(other)
    with pytest.raises(ValueError, match="^a game named 'cartpole' is already registered$"):
        games.register(dataclasses.replace(snake, name="cartpole"))
    assert games.register(other, overwrite=True) is other and games.get("my_snake") is other


def test_register_takes_only_a_game_spec(registry):
    with pytest.raises(TypeError, match="^register\\(\\) takes a GameSpec, got dict$"):
        games.register({"name": "snake"})


def test_register_refuses_a_spec_whose_name_was_changed_after_it_was_made(registry):
    spec = dataclasses.replace(games.get("snake"), name="snake_renamed")
    object.__setattr__(spec, "name", "../../evil")
    with pytest.raises(ValueError, match=r"^game name '\.\./\.\./evil' is not valid"):
        games.register(spec)
    assert "../../evil" not in games.names()

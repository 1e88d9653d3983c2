"""fasttrain.config.file: field docs read from the source and the config written as TOML that
reads back to the same settings (config.toml itself: test_config.py checks it is current)."""

import dataclasses

import pytest
import tomllib

from fasttrain import games
from fasttrain.config import file as configfile
from fasttrain.config import resolve as cfg
from fasttrain.config.file import _toml_value, field_docs
from tests.cli import ROOT


@dataclasses.dataclass
class Parent:
    rate: float = 0.1
    """the rate, as the parent has it"""
    plain: int = 1
    spread: int = 2
    """a docstring that goes on
    over two lines"""


@dataclasses.dataclass
class Child(Parent):
    rate: float = 0.5
    """the child's own rate"""
    extra: str = "x"
    """only the child has it"""


def test_every_key_has_a_comment():
    for line in (ROOT / "config.toml").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            assert "  # " in line, f"no comment: {line!r}"


def test_field_docs_cover_every_field():
    for cls in [*cfg.SECTIONS.values(), *(games.get(g).params_cls for g in games.names())]:
        docs = configfile.field_docs(cls)
        assert set(docs) == {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_resolved_config_round_trips():
    config = cfg.load(sets=["game.snake.width=9", "game.snake.ppo.num_steps=32", "model.hidden=64"])
    again = cfg.from_dict(tomllib.loads(configfile.to_toml(config)))
    assert again.params == config.params
    assert again.learner == config.learner and again.model == config.model


def test_written_config_reads_back_to_the_same_settings_for_every_game(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[ppo]\nnum_envs = 32\n[dqn]\nbatch_size = 64\n")
    config = cfg.load(path, sets=["game.cartpole.ppo.num_steps=8", "ppo.ent_coef=0.5"])
    again = cfg.from_dict(tomllib.loads(configfile.to_toml(config)))
    for game in games.names():
        for name in cfg.LEARNER_SECTIONS:
            assert again.layers.learner(name, game) == config.layers.learner(name, game), (
                game,
                name,
            )
        assert again.layers.model(game) == config.layers.model(game), game


@pytest.mark.parametrize("chosen", ["cartpole", "snake"])
def test_written_model_reads_back_for_every_game(chosen):
    """A run's config.toml names its own network in [model] and every other game's in
    [game.<name>.model], so it reads back the same whichever game it is used for."""
    config = cfg.load(sets=[f"game.name={chosen}", "game.snake.model.layers=3"])
    again = cfg.from_dict(tomllib.loads(configfile.to_toml(config)))
    assert again.model == config.model
    for game in games.names():
        assert again.layers.model(game) == config.layers.model(game), game
    assert config.layers.model("snake").layers == 3


def test_field_docs_take_the_docstring_under_each_field_and_a_subclasss_own():
    assert field_docs(Parent) == {
        "rate": "the rate, as the parent has it",
        "spread": "a docstring that goes on\n    over two lines",
    }  # a field with none has none
    assert field_docs(Child) == {
        "rate": "the child's own rate",
        "spread": "a docstring that goes on\n    over two lines",
        "extra": "only the child has it",
    }

    @dataclasses.dataclass
    class Local:  # not a top-level class of its module: its own source is parsed
        size: int = 3
        """the size"""

    assert field_docs(Local) == {"size": "the size"}


@pytest.mark.parametrize(
    "value, text",
    [
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (0.1, "0.1"),
        (1e-05, "1e-05"),
        ('a "quoted" back\\slash', '"a \\"quoted\\" back\\\\slash"'),
        ({"num_bots": 2, "bot_policy": "greedy"}, '{ num_bots = 2, bot_policy = "greedy" }'),
        ({}, "{}"),
    ],
)
def test_each_value_is_written_as_toml_that_reads_back_to_it(value, text):
    assert _toml_value(value) == text
    assert tomllib.loads(f"x = {text}")["x"] == value


def test_the_comments_of_a_table_line_up_on_one_line_each():
    text = configfile.to_toml(cfg.defaults())
    run = text.split("[run]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(run) > 3
    columns = {line.index("  # ") for line in run}
    assert len(columns) == 1  # one column for every comment of the table
    (column,) = columns
    assert max(len(line.split("  # ")[0].rstrip()) for line in run) == column
    docs = field_docs(cfg.SECTIONS["run"])
    for line in run:  # each comment is its field's docstring on one line
        key = line.split(" = ")[0]
        assert line[column + 4 :] == " ".join(docs[key].split())


def test_a_header_comes_first_and_brings_the_curriculum_help_without_stages():
    config = cfg.defaults()
    plain = configfile.to_toml(config)
    assert not plain.startswith("#") and "[[curriculum.stage]]" not in plain
    text = configfile.to_toml(config, "# my header\n")
    assert text.startswith("# my header\n\n[run]\n")
    assert text.endswith(configfile.CURRICULUM_HELP + "\n")


def test_the_chosen_games_table_holds_what_the_command_line_set_after_resolution():
    config = cfg.load(sets=["game.name=cartpole"]).with_learner("command line", num_envs=7)
    data = tomllib.loads(configfile.to_toml(config))
    assert data["game"]["cartpole"]["ppo"]["num_envs"] == 7
    assert data["ppo"]["num_envs"] == config.layers.section("ppo").num_envs != 7  # as written
    assert cfg.from_dict(data).learner.num_envs == 7


def test_only_what_differs_from_the_base_section_is_written_per_game():
    config = cfg.load(sets=["ppo.ent_coef=0.5", "game.snake.ppo.ent_coef=0.5"])
    data = tomllib.loads(configfile.to_toml(config))
    snake = data["game"]["snake"].get("ppo", {})
    assert "ent_coef" not in snake  # equal to [ppo]'s: not repeated
    assert data["ppo"]["ent_coef"] == 0.5
    for key, value in snake.items():
        assert value != data["ppo"][key], key

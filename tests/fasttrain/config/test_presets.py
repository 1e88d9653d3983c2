"""The presets are data: one TOML file per game, each a config layer for its game alone."""

import dataclasses
import re

import pytest

from fasttrain import games
from fasttrain.config import presets
from fasttrain.config import resolve as cfg
from fasttrain.config.file import field_docs
from fasttrain.config.sections import RunConfig
from tests.cli import ROOT

FILES = sorted(presets.PRESET_DIR.glob("*.toml"))


def test_every_game_has_a_preset_file_and_every_file_is_a_game():
    assert [path.stem for path in FILES] == sorted(games.names())


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_a_preset_file_is_a_config_layer_checked_like_any_other(path):
    data = presets.read(path)
    layer = cfg.check_layer({k: v for k, v in data.items() if k not in presets.VARIANTS}, str(path))
    game = path.stem
    assert set(layer.games) == {game}  # its own game's tables, nothing else
    assert set(layer.sections) == {"run", "game"} and not layer.sections["game"]  # no [game] key
    assert set(layer.sections["run"]) == {"algo"}
    assert layer.sections["run"]["algo"] == presets.learner_of(game)
    for section, values in layer.games[game].items():  # checked values: what the presets hold
        assert values == presets.GAME_DEFAULTS[game].get(section, {}), section
    for variant in presets.VARIANTS:  # each variant's tables are a layer of the game's too
        if variant in data:
            assert set(cfg.check_layer(data[variant], f"{path} [{variant}]").games) == {game}


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_a_preset_file_names_its_measurement_in_one_line_that_the_docs_have(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# from: docs/performance.md, How the presets were chosen: ")
    assert sum(line.startswith("#") for line in lines) == 1  # the numbers live in the docs
    performance = (ROOT / "docs" / "performance.md").read_text()
    assert "## How the presets were chosen" in performance
    named = lines[0].split("How the presets were chosen: ")[1].split(" (")[0]
    assert f"**{named.removeprefix('MinAtar ')}**" in performance, named


def test_the_presets_resolve_to_the_values_each_game_trains_with():
    """A few values pinned (the whole table is pinned by config.toml, see test_config.py)."""
    assert presets.preset("snake", "ppo")["learning_rate"] == 1.66e-3
    assert presets.preset("minatar-breakout", "params") == {"minimal_action_set": True}
    assert presets.preset("minatar-breakout", "model") == {"activation": "relu", "hidden": 512}
    assert presets.preset("cartpole", "dqn")["double_q"] is True
    assert presets.preset("arena", "pqn") == {}
    assert "params" not in presets.GAME_DEFAULTS["snake"]  # no params table: none is listed
    learners = {game: presets.learner_of(game) for game in games.names()}
    assert {g for g, a in learners.items() if a != "ppo"} == {"minatar-asterix", "minatar-seaquest"}
    assert cfg.from_dict({"game": {"name": "minatar-asterix"}}).run.algo == "pqn"


def test_snakes_fp32_variant_is_what_a_cpu_without_bf16_trains():
    """The one measured variant so far (docs/performance.md, How the presets were chosen)."""
    fp32 = presets.preset("snake", "ppo", "fp32")
    assert (fp32["update_epochs"], fp32["num_minibatches"]) == (1, 4)
    assert fp32["total_timesteps"] == 30_000_000 and fp32["learning_rate"] == 2.5e-3
    assert fp32["gamma"] == presets.preset("snake", "ppo")["gamma"]  # the base under it
    assert presets.has_variant("snake", "fp32") and not presets.has_variant("snake", "cuda")
    assert not any(presets.has_variant(g, "fp32") for g in games.names() if g != "snake")


def test_a_preset_may_depend_on_the_device(tmp_path):
    (tmp_path / "snake.toml").write_text(
        '# from: a test\n[run]\nalgo = "ppo"\n\n[game.snake.ppo]\nnum_envs = 512\nnum_steps = 32\n'
        "\n[cuda.game.snake.ppo]\nnum_envs = 4096\n"
    )
    data = presets.load(tmp_path)["snake"]
    assert presets._sections(data["cuda"], "snake") == {"ppo": {"num_envs": 4096}}
    cfg.check_layer(data["cuda"], "cuda")  # the [cuda] table is a layer too


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[ppo]\nnum_envs = 8\n", "[ppo]"),  # a preset sets its own game's tables only
        ("[game.cartpole.ppo]\nnum_envs = 8\n", "[game]"),
        ("[run]\nseed = 3\n", "[run]"),
        ("[cuda.game.cartpole.ppo]\nnum_envs = 8\n", "[cuda]"),
        ("[fp32.game.cartpole.ppo]\nnum_envs = 8\n", "[fp32]"),
        ("[avx2.game.snake.ppo]\nnum_envs = 8\n", "[avx2]"),
    ],
)
def test_a_preset_file_that_sets_more_than_its_game_is_refused(tmp_path, text, names):
    path = tmp_path / "snake.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(names)):
        presets.read(path)


def test_each_games_learner_is_documented_where_a_user_looks_for_it():
    """--algo's help, run.algo's docstring (config.toml's comment) and the config docs."""
    from click.testing import CliRunner

    from fasttrain.cli import main

    words = presets.default_learners()
    assert words == "pqn for minatar-asterix and minatar-seaquest, ppo for the others"
    assert words in " ".join(field_docs(RunConfig)["algo"].split())
    assert words in " ".join((ROOT / "docs" / "config.md").read_text().split())
    help_text = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    assert words in " ".join(help_text.split())
    assert RunConfig().algo == "ppo" == dataclasses.fields(RunConfig)[0].default

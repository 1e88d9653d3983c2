"""``fasttrain/bench/folders.py``: a run folder counts as ``bench --learning``'s run only if its
game, learner, settings, steps and seed are the call's, and a file that cannot be read as a
run's is named in one line. The suite's own use of it: test_learning.py."""

from __future__ import annotations

import json
import shutil

import pytest

from fasttrain.bench import learning
from fasttrain.bench.folders import BrokenRun, foreign, read_rows, read_summary, set_aside
from fasttrain.errors import RunError
from fasttrain.run.rundir import RunLock

SETS = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.ppo.num_envs=16",
    "game.snake.ppo.num_steps=8",
    "game.cartpole.ppo.num_envs=32",
    "run.compile=off",
    "model.hidden=32",
]
STEPS = 512


def planned(game: str, seed: int = 0, steps: int = STEPS, sets=SETS):
    return learning.suite_config(game, "ppo", seed, steps, "cpu", sets)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A finished CartPole run and a finished Snake run, each of ``STEPS`` steps, seed 0."""
    root = tmp_path_factory.mktemp("folders")
    runs = {}
    for game in ("cartpole", "snake"):
        runs[game] = root / f"{game}-ppo-seed0"
        learning.train(planned(game), runs[game], None, echo=lambda *a, **k: None)
    return runs


@pytest.fixture
def copy(made, tmp_path):
    def copy(game: str, name: str = "run"):
        return shutil.copytree(made[game], tmp_path / name)

    return copy


def test_the_run_a_call_plans_is_its_own(made):
    assert foreign(made["cartpole"], planned("cartpole")) is None
    assert foreign(made["cartpole"].parent / "empty", planned("cartpole")) is None  # none yet


@pytest.mark.parametrize(
    "config, words",
    [
        (planned("cartpole", steps=1024), "ppo.total_timesteps = 512, this call runs 1024"),
        (planned("cartpole", seed=1), "run.seed = 0, this call runs 1"),
        (
            planned("cartpole", sets=[*SETS, "model.hidden=16"]),
            "model.hidden = 32, this call runs 16",
        ),
        (
            planned("cartpole", sets=[*SETS, "ppo.ent_coef=0.5"]),
            "ppo.ent_coef = 0.0, this call runs 0.5",
        ),
    ],
    ids=["steps", "seed", "model", "learner setting"],
)
def test_a_run_made_with_other_steps_settings_or_seed_is_not_the_calls(made, config, words):
    assert foreign(made["cartpole"], config) == f"its config.toml was made with {words}"


def test_a_snake_run_in_a_cartpole_seeds_folder_is_not_the_calls(copy):
    run = copy("snake", "cartpole-ppo-seed0")
    expected = "its config.toml was made with game.name = 'snake', this call runs 'cartpole'"
    assert foreign(run, planned("cartpole")) == expected
    (run / "config.toml").write_text("[run\nalgo = ")  # cut short: not TOML
    assert foreign(run, planned("cartpole")).startswith("config.toml is not a run's config: ")


def test_a_checkpoint_or_summary_of_another_run_is_found_too(made, copy):
    run = copy("cartpole")
    shutil.copy(made["snake"] / "checkpoint.pt", run / "checkpoint.pt")
    expected = "its checkpoint.pt was made with game.name = 'snake', this call runs 'cartpole'"
    assert foreign(run, planned("cartpole")) == expected
    run = copy("cartpole", "second")
    shutil.copy(made["snake"] / "summary.json", run / "summary.json")
    assert foreign(run, planned("cartpole")) == (
        "its summary.json is of game.name = 'snake', this call runs 'cartpole'"
    )
    run = copy("cartpole", "third")
    (run / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes()[:100])
    assert "checkpoint" in foreign(run, planned("cartpole"))
    run = copy("cartpole", "fourth")
    (run / "config.toml").unlink()
    assert foreign(run, planned("cartpole")) == "it has no config.toml to tell what made it"


def summary_with(run, text: str):
    (run / "summary.json").write_text(text)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda text: text[: len(text) // 2], "summary.json is not JSON"),
        (lambda text: "[1, 2]", "summary.json holds a list, not a run summary"),
        (lambda text: text.replace('"interrupted": false', '"interrupted": "no"'), "interr"),
        (lambda text: text.replace('"algo": "ppo"', '"algo": 3'), "has algo = 3, not a string"),
        (lambda text: text.replace('"global_step": 512', '"global_step": 1.5'), "global_step"),
        (lambda text: text.replace('"global_step": 512', '"global_step": true'), "global_step"),
    ],
    ids=["truncated", "a list", "a string flag", "algo a number", "a float step", "a bool step"],
)
def test_a_broken_summary_is_named_in_one_line(copy, change, words):
    run = copy("cartpole")
    summary_with(run, change((run / "summary.json").read_text()))
    with pytest.raises(BrokenRun, match=words):
        read_summary(run)
    problem = foreign(run, planned("cartpole"))
    assert problem.startswith("summary.json ") and "\n" not in problem
    assert not learning.finished(run)


def metrics_with(run, change):
    path = run / "metrics.csv"
    path.write_text(change(path.read_text()))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda text: text[: text.index("\n") + 20], "metrics.csv row 1 has 4 fields, not "),
        (lambda text: text.replace("global_step", "step", 1), "has no column global_step"),
        (lambda text: text.replace("charts/episodic_return", "return", 1), "no column charts"),
        (lambda text: text[: text.index("\n") + 1], "metrics.csv has no rows"),
        (lambda text: "", "metrics.csv has no column global_step"),
        (lambda text: text.replace("\n512,", "\nmany,", 1), "has global_step 'many'"),
    ],
    ids=["truncated", "no global_step", "no return", "no rows", "empty", "a word"],
)
def test_a_broken_metrics_csv_is_named_in_one_line(copy, change, words):
    run = copy("cartpole")
    metrics_with(run, change)
    with pytest.raises(BrokenRun, match=words):
        read_rows(run, learning.COLUMNS["return"])


def test_a_folder_set_aside_keeps_every_file_and_a_live_one_is_refused(copy):
    run = copy("cartpole")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    aside = set_aside(run)
    assert aside.name == "run.old" and not run.exists()
    assert {p.name: p.read_bytes() for p in aside.iterdir() if p.is_file()} == before
    run = copy("cartpole")
    assert set_aside(run).name == "run.old-2"
    run = copy("cartpole")
    with RunLock(run), pytest.raises(RunError, match="is in use by process"):
        set_aside(run)  # another holder of the lock: its run is live
    assert (run / "checkpoint.pt").exists()


def test_the_summary_the_runner_writes_passes_the_checks(made):
    summary = read_summary(made["snake"])
    assert summary == json.loads((made["snake"] / "summary.json").read_text())
    assert summary["game"] == "snake" and summary["global_step"] == STEPS

"""``fasttrain bench --learning``: the learning suite's table, JSON and picture, at a tiny size."""

from __future__ import annotations

import csv
import importlib
import json
import math
import shutil
import statistics

import pytest
from click.testing import CliRunner

from fasttrain.bench import learning
from fasttrain.cli import main
from tests.cli import sets

SMALL = sets(
    "game.snake.ppo.num_envs=32",
    "game.snake.ppo.num_steps=16",
    "game.cartpole.ppo.num_envs=32",
    "run.compile=off",
    "model.hidden=32",
)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("learning") / "suite"
    args = ["bench", "--learning", "--game", "cartpole", "--game", "snake", "--seeds", "0,1"]
    args += ["--solo"]  # each seed its own run (populations: below)
    result = CliRunner().invoke(main, [*args, "--steps", "2048", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out, result.output


def test_the_suite_trains_every_game_and_seed_and_writes_its_table(suite):
    out, output = suite
    for game in ("cartpole", "snake"):
        for seed in (0, 1):
            run_dir = out / f"{game}-ppo-seed{seed}"
            assert json.loads((run_dir / "summary.json").read_text())["global_step"] == 2048
    lines = (out / "learning.md").read_text().splitlines()
    # the header names what the call changed: these are not the presets' own runs
    assert lines[0].startswith("Learning with the default presets (ppo) with --set game.snake")
    assert "--set model.hidden=32 --steps 2048 --solo, " in lines[0]
    rows = [line for line in lines if line.startswith("| cartpole") or line.startswith("| snake")]
    assert len(rows) == 2
    cells = rows[0].strip("|").split("|")
    assert [c.strip() for c in cells[:3]] == ["cartpole", "ppo", "0, 1"]
    assert "475 return" in cells[5]
    data = json.loads((out / "learning.json").read_text())
    assert data["changes"][-3:] == ["--set model.hidden=32", "--steps 2048", "--solo"]
    seconds = [r["seconds"] for r in data["runs"] if r["game"] == "cartpole"]
    assert cells[11].strip() == "one by one"
    assert float(cells[12]) == pytest.approx(sum(seconds), abs=0.51)  # one after another
    finals = {(r["game"], r["seed"]): r["final"] for r in data["runs"]}
    assert set(finals) == {("cartpole", 0), ("cartpole", 1), ("snake", 0), ("snake", 1)}
    median = statistics.median([finals["cartpole", 0], finals["cartpole", 1]])
    assert float(cells[3]) == pytest.approx(median, abs=0.051)  # printed to one decimal
    png = (out / "learning.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_a_second_call_reads_the_finished_runs_instead_of_training_again(suite):
    out, _ = suite
    before = (out / "cartpole-ppo-seed0" / "metrics.csv").read_bytes()
    args = ["bench", "--learning", "--game", "cartpole", "--seeds", "0", "--steps", "2048"]
    result = CliRunner().invoke(main, [*args, "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    assert "finished before, read as it is" in result.output
    assert "training" not in result.output
    assert (out / "cartpole-ppo-seed0" / "metrics.csv").read_bytes() == before


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def drop_column(path):
    path.write_text(path.read_text().replace("charts/episodic_return", "return", 1))


@pytest.mark.parametrize(
    "source, steps, change, words",
    [
        (
            "snake-ppo-seed0",
            "2048",
            None,
            "its config.toml was made with game.name = 'snake', this call runs 'cartpole'",
        ),
        (
            "cartpole-ppo-seed0",
            "1024",
            None,
            "its config.toml was made with ppo.total_timesteps = 2048, this call runs 1024",
        ),
        (
            "cartpole-ppo-seed0",
            "2048",
            ("summary.json", truncate),
            "summary.json is not JSON (cut short, or not a run summary)",
        ),
        (
            "cartpole-ppo-seed0",
            "2048",
            ("metrics.csv", drop_column),
            "metrics.csv has no column charts/episodic_return",
        ),
    ],
    ids=["a snake run", "other steps", "broken summary", "broken metrics"],
)
def test_a_folder_not_of_this_calls_run_is_set_aside_and_trained_again(
    suite, tmp_path, source, steps, change, words
):
    """A finished run of another game, other --steps, or with a file that cannot be read in a
    seed's folder: one line, the folder kept beside as it was, the run trained as planned."""
    out, _ = suite
    run_dir = tmp_path / "cartpole-ppo-seed0"
    shutil.copytree(out / source, run_dir)
    if change is not None:
        change[1](run_dir / change[0])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    args = ["bench", "--learning", "--game", "cartpole", "--seeds", "0", "--steps", steps]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path), *SMALL])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert f"{run_dir}: {words}; moved to cartpole-ppo-seed0.old, training it again\n" in (
        result.output
    )
    aside = tmp_path / "cartpole-ppo-seed0.old"
    assert {p.name: p.read_bytes() for p in aside.iterdir() if p.is_file()} == before
    [run] = json.loads((tmp_path / "learning.json").read_text())["runs"]
    assert (run["game"], run["algo"], run["steps"]) == ("cartpole", "ppo", int(steps))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["game"], summary["global_step"]) == ("cartpole", int(steps))


def test_the_load_average_is_the_machines_before_the_first_run(tmp_path, monkeypatch):
    """The JSON's load average is read before any run starts: read at the end, it would be the
    suite's own load (2.0 on 2 busy cores) and say the machine was shared when it was not."""
    report = importlib.import_module("fasttrain.bench.report")  # the package's report() shadows it
    started = []
    train = learning.train

    def counted(*args, **kwargs):
        started.append(True)
        return train(*args, **kwargs)

    monkeypatch.setattr(learning, "train", counted)
    monkeypatch.setattr(report, "load_average", lambda: [9.0] * 3 if started else [0.25] * 3)
    out = tmp_path / "suite"
    args = ["bench", "--learning", "--game", "cartpole", "--seeds", "0", "--steps", "2048"]
    result = CliRunner().invoke(main, [*args, "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert started  # it trained
    machine = json.loads((out / "learning.json").read_text())["machine"]
    assert machine["load_average_at_start"] == [0.25] * 3


def test_a_run_the_budget_cut_is_read_again_under_that_budget_and_trained_on_under_more(
    tmp_path,
):
    """Read again with the same --budget, a run the budget stopped is finished: resumed, it
    would train one more iteration and change its own final score. A larger budget trains it
    on from its checkpoint."""
    out = tmp_path / "suite"
    base = ["bench", "--learning", "--game", "cartpole", "--seeds", "0", "--steps", "1000000"]
    base += ["--out", str(out), *SMALL]
    run_dir = out / "cartpole-ppo-seed0"

    def call(budget):
        result = CliRunner().invoke(main, [*base, "--budget", str(budget)])
        assert result.exit_code == 0, result.output + repr(result.exception)
        return result.output

    call(0.3)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_early"] and summary["global_step"] < 1_000_000, summary
    before = (run_dir / "metrics.csv").read_bytes()
    assert "finished before, read as it is" in call(0.3)
    assert (run_dir / "metrics.csv").read_bytes() == before
    with open(run_dir / "metrics.csv", newline="") as f:
        used = float(list(csv.DictReader(f))[-1]["time_s"])  # the first row may pass 0.3 s
    assert "training into" in call(used + 0.5)
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["global_step"] > summary["global_step"]


def test_the_final_score_is_the_mean_of_the_last_twentieth_of_the_steps():
    steps = list(range(100, 2100, 100))  # 20 rows up to 2000 steps: the last 5% starts at 1900
    values = [float(v) for v in range(20)]
    assert learning.final_value(steps, values) == pytest.approx((18 + 19) / 2)
    values[-1] = math.nan  # a row without an episode is left out
    assert learning.final_value(steps, values) == 18.0


def test_times_to_a_share_count_a_seed_that_never_got_there_as_infinitely_slow():
    assert learning._seconds([10.0, 30.0, 20.0]) == "20"
    assert learning._seconds([10.0, None, 20.0]) == "20 (2/3)"
    assert learning._seconds([10.0, None, None]) == "not reached (1/3)"


@pytest.mark.parametrize(
    "args,words",
    [
        (["--learning", "--seeds", "a,b"], "--seeds takes distinct seeds >= 0"),
        (["--learning", "--quick"], "--quick is for the speed tables"),
        (["--seeds", "0"], "--seeds needs --learning"),
        (["--learning", "--game", "nope"], "unknown game 'nope'"),
        (["--learning", "--budget", "nan"], "training seconds > 0 such as 600, got nan"),
        (["--learning", "--budget", "inf"], "training seconds > 0 such as 600, got inf"),
        (["--learning", "--budget", "-1"], "--budget"),
        (["--learning", "--budget", "0"], "--budget"),
    ],
)
def test_bad_suite_options_are_one_line(args, words):
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code in (1, 2) and words in result.output, result.output
    assert "Traceback" not in result.output


def test_each_game_trains_with_its_own_learner_unless_algo_names_one():
    assert learning.learner_of("minatar-seaquest", None) == "pqn"  # its preset's [run] algo
    assert learning.learner_of("minatar-asterix", None) == "pqn"
    assert learning.learner_of("minatar-breakout", None) == "ppo"
    assert learning.learner_of("minatar-seaquest", "ppo") == "ppo"
    config = learning.suite_config("minatar-seaquest", "pqn", 0, 4096, "cpu", ())
    assert config.run.algo == "pqn" and config.learner.total_timesteps == 4096


def test_the_table_names_the_learner_of_each_game():
    def result(game, algo, seed):
        return learning.RunResult(
            game=game,
            seed=seed,
            run_dir="",
            algo=algo,
            steps=10,
            seconds=1.0,
            sps=10.0,
            final=float(seed),
            best=float(seed),
            to_reference={"50%": 1.0, "90%": None},
            precision="fp32",
            curve=[],
        )

    text = learning.table([result("minatar-seaquest", "pqn", 0), result("snake", "ppo", 1)])
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines()}
    assert rows["minatar-seaquest"] == "pqn" and rows["snake"] == "ppo"


def test_a_games_seeds_train_as_one_population_and_the_table_says_so(tmp_path):
    """PPO's seeds are one population (``fasttrain run --seeds``): one member directory per
    seed, the table's row says so and counts the population's seconds once; a second call
    reads it; a learner without populations (DQN) trains its seeds one by one."""
    out = tmp_path / "suite"
    args = ["bench", "--learning", "--game", "cartpole", "--seeds", "0,1", "--steps", "2048"]
    result = CliRunner().invoke(main, [*args, "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "training as one population into" in result.output
    folder = out / "cartpole-ppo-population"
    assert json.loads((folder / "population.json").read_text())["seeds"] == [0, 1]
    for seed in (0, 1):
        summary = json.loads((folder / f"seed-{seed}" / "summary.json").read_text())
        assert summary["global_step"] == 2048 and summary["member"]["seed"] == seed
    data = json.loads((out / "learning.json").read_text())
    assert [(r["seed"], r["members"]) for r in data["runs"]] == [(0, 2), (1, 2)]
    [row] = [
        line
        for line in (out / "learning.md").read_text().splitlines()
        if line.startswith("| cartpole")
    ]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[11] == "one population of 2"
    assert float(cells[12]) == pytest.approx(max(r["seconds"] for r in data["runs"]), abs=0.51)
    before = (folder / "seed-1" / "metrics.csv").read_bytes()
    again = CliRunner().invoke(main, [*args, "--out", str(out), *SMALL])
    assert again.exit_code == 0, again.output + repr(again.exception)
    assert f"{folder}: finished before, read as it is" in again.output
    assert "training" not in again.output
    assert (folder / "seed-1" / "metrics.csv").read_bytes() == before
    dqn_sizes = ["--set", "game.cartpole.dqn.learning_starts=256"]
    dqn = CliRunner().invoke(main, [*args, "--algo", "dqn", "--out", str(out), *SMALL, *dqn_sizes])
    assert dqn.exit_code == 0, dqn.output + repr(dqn.exception)
    assert (out / "cartpole-dqn-seed0").is_dir() and (out / "cartpole-dqn-seed1").is_dir()
    assert "one by one" in (out / "learning.md").read_text()


def test_a_population_the_budget_cut_trains_on_under_more_and_another_is_set_aside(tmp_path):
    """--budget stops the whole population at one boundary (every member saved, marked
    stopped early); a larger budget resumes every member from its checkpoint; a population
    folder of other seeds is set aside, never deleted, and trained again."""
    out = tmp_path / "suite"
    base = ["bench", "--learning", "--game", "cartpole", "--steps", "1000000", "--out", str(out)]
    folder = out / "cartpole-ppo-population"

    def call(*extra):
        result = CliRunner().invoke(main, [*base, *SMALL, *extra])
        assert result.exit_code == 0, result.output + repr(result.exception)
        return result.output

    call("--seeds", "0,1", "--budget", "0.3")
    summaries = [json.loads((folder / f"seed-{s}" / "summary.json").read_text()) for s in (0, 1)]
    assert all(s["stopped_early"] for s in summaries), summaries
    assert len({s["global_step"] for s in summaries}) == 1
    assert summaries[0]["global_step"] < 1_000_000
    with open(folder / "seed-0" / "metrics.csv", newline="") as f:
        used = float(list(csv.DictReader(f))[-1]["time_s"])
    assert "training as one population" in call("--seeds", "0,1", "--budget", str(used + 0.5))
    for seed in (0, 1):
        after = json.loads((folder / f"seed-{seed}" / "summary.json").read_text())
        assert after["global_step"] > summaries[0]["global_step"]
    output = call("--seeds", "0,2", "--budget", "0.3")
    assert "trains seeds 0, 2; moved to cartpole-ppo-population.old, training it again" in output
    assert (out / "cartpole-ppo-population.old" / "seed-1" / "checkpoint.pt").exists()
    assert json.loads((folder / "population.json").read_text())["seeds"] == [0, 2]

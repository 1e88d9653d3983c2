"""fasttrain sweep: trials are run directories, trials.csv and best.toml name the best one, a
study continues, Ctrl-C keeps what was done, and a missing optuna ends in one line (bad sweep
files: test_sweepfile.py)."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasttrain import sweep as sweeping
from fasttrain import sweepfile
from fasttrain.cli import main
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from tests.cli import ROOT
from tests.fasttrain.test_sweepfile import invoke, one_line, write

FINAL_RETURN = """
[sweep]
trials = 2
objective = "final_return"
[sweep.params]
"ppo.learning_rate" = { low = 1e-4, high = 1e-2, log = true }
"game.cartpole.ppo.update_epochs" = { low = 1, high = 4 }
"""
LR, EPOCHS = "ppo.learning_rate", "game.cartpole.ppo.update_epochs"
TIME_TO_TARGET = """
[sweep]
trials = {trials}
objective = "time_to_target"
target = 5.0
budget_s = 60.0
[sweep.params]
"ppo.learning_rate" = {{ low = 1e-4, high = 1e-2, log = true }}
"""
needs_optuna = pytest.mark.skipif(
    importlib.util.find_spec("optuna") is None,
    reason="optuna is not installed (it comes with the `test` extra)",
)


def read_trials(out: Path) -> list[dict]:
    with open(out / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------- end to end


@needs_optuna
def test_two_trials_write_run_dirs_trials_csv_and_the_best_config(tmp_path):
    out = tmp_path / "out"
    result = invoke("--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = read_trials(out)
    assert [row["trial"] for row in rows] == ["0", "1"]
    assert rows[0][LR] != rows[1][LR]  # the sampler picked two different points
    for row in rows:
        run_dir = out / f"trial-{int(row['trial']):04d}"
        assert row["state"] == "complete" and row["run_dir"] == str(run_dir)
        assert (run_dir / "metrics.csv").exists() and (run_dir / "checkpoint.pt").exists()
        # final_return is the mean return of the rows in the run's last twentieth
        with open(run_dir / "metrics.csv", newline="") as f:
            reader = csv.DictReader(f)
            metrics = [(int(r["global_step"]), float(r["charts/episodic_return"])) for r in reader]
        metrics = [(step, value) for step, value in metrics if math.isfinite(value)]
        last = metrics[-1][0]
        tail = [value for step, value in metrics if step >= last - 4096 // 20]
        assert len(tail) >= 1 and math.isclose(float(row["value"]), sum(tail) / len(tail))
        # the sampled values are the ones the run trained with
        ran = cfg.build([("trial", cfg.load_toml(run_dir / "config.toml"))]).learner
        assert ran.learning_rate == float(row[LR]) and ran.update_epochs == int(row[EPOCHS])
        assert ran.total_timesteps == 4096 and ran.num_envs == 8  # the base config underneath
        assert f"trial {row['trial']:>4}  complete" in result.output  # its progress line

    best = max(rows, key=lambda row: float(row["value"]))
    assert float(best["value"]) > float(min(rows, key=lambda row: float(row["value"]))["value"])
    config = cfg.build([("best.toml", cfg.load_toml(out / "best.toml"))])
    learner = config.learner
    assert learner.learning_rate == float(best[LR]) and learner.update_epochs == int(best[EPOCHS])
    assert learner.num_envs == 8 and config.game.name == "cartpole"
    table = result.output[result.output.index("best first") :].splitlines()
    assert table[2].split()[0] == best["trial"]  # the table starts with the best trial

    # the same command continues the study, without repeating a trial's params
    result = invoke(
        "--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(out), "--trials", "3"
    )
    assert result.exit_code == 0, result.output
    rows = read_trials(out)
    assert len(rows) == 3 and (out / "trial-0002" / "summary.json").exists()
    assert rows[2][LR] not in (rows[0][LR], rows[1][LR])
    # another objective into the same study is refused in one line
    other = write(tmp_path, FINAL_RETURN.replace("final_return", "final_score"), "other.toml")
    result = invoke("--config", str(other), "--out", str(out))
    assert result.exit_code != 0 and "another sweep" in one_line(result)


@needs_optuna
def test_time_to_target_stops_each_trial_at_the_target(tmp_path):
    text = TIME_TO_TARGET.format(trials=1)
    out = tmp_path / "out"
    result = invoke("--config", str(write(tmp_path, text)), "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_trials(out)
    summary = json.loads((out / "trial-0000" / "summary.json").read_text())
    metrics = list(csv.DictReader(open(out / "trial-0000" / "metrics.csv", newline="")))
    # a random CartPole policy lasts ~20 steps: the first row with an episode reaches 5
    first = next(r for r in metrics if math.isfinite(float(r["charts/episodic_return"])))
    assert summary["stopped_early"] and summary["global_step"] == int(first["global_step"]) < 4096
    assert float(row["value"]) == float(first["time_s"])  # training seconds, not wall time
    assert "reached return 5" in row["note"]


POPULATION = """
[sweep]
trials = 3
objective = "final_return"
[sweep.params]
"ppo.learning_rate" = { low = 1e-4, high = 1e-2, log = true }
"ppo.gamma" = { choices = [0.9, 0.99] }
"""


@needs_optuna
def test_a_population_sweep_trains_its_trials_side_by_side_each_with_its_values(tmp_path):
    """--population 2: trials 0 and 1 are members of one population (normal run directories
    in population-0000/), each trained with its sampled values and valued from its own rows;
    the third trial, alone, is a solo run."""
    out = tmp_path / "out"
    result = invoke(
        "--config", str(write(tmp_path, POPULATION)), "--out", str(out), "--population", "2"
    )
    assert result.exit_code == 0, result.output
    assert "2 trials at a time as one population" in result.output
    rows = read_trials(out)
    assert [row["state"] for row in rows] == ["complete"] * 3
    dirs = [
        out / "population-0000" / "trial-0000",
        out / "population-0000" / "trial-0001",
        out / "trial-0002",
    ]
    population = json.loads((out / "population-0000" / "population.json").read_text())
    assert [m["dir"] for m in population["members"]] == ["trial-0000", "trial-0001"]
    factors = []
    for row, run_dir in zip(rows, dirs, strict=True):
        assert row["run_dir"] == str(run_dir)
        ran = cfg.build([("trial", cfg.load_toml(run_dir / "config.toml"))]).learner
        assert ran.learning_rate == float(row[LR]) and ran.gamma == float(row["ppo.gamma"])
        with open(run_dir / "metrics.csv", newline="") as f:
            table = list(csv.DictReader(f))
        # the rate it stepped with: the sampled one on the schedule every trial shares
        factors.append(float(table[0]["charts/learning_rate"]) / float(row[LR]))
        metrics = [(int(r["global_step"]), float(r["charts/episodic_return"])) for r in table]
        metrics = [(step, value) for step, value in metrics if math.isfinite(value)]
        last = metrics[-1][0]
        tail = [value for step, value in metrics if step >= last - 4096 // 20]
        assert math.isclose(float(row["value"]), sum(tail) / len(tail))
    assert rows[0][LR] != rows[1][LR]
    assert factors == pytest.approx([factors[2]] * 3, rel=1e-5)


@needs_optuna
def test_a_population_sweeps_trials_reach_their_target_and_stop_alone(tmp_path):
    text = TIME_TO_TARGET.format(trials=2)
    out = tmp_path / "out"
    result = invoke("--config", str(write(tmp_path, text)), "--out", str(out), "--population", "2")
    assert result.exit_code == 0, result.output
    for row in read_trials(out):
        run_dir = out / "population-0000" / f"trial-{int(row['trial']):04d}"
        summary = json.loads((run_dir / "summary.json").read_text())
        metrics = list(csv.DictReader(open(run_dir / "metrics.csv", newline="")))
        first = next(r for r in metrics if math.isfinite(float(r["charts/episodic_return"])))
        assert summary["stopped_early"] and int(metrics[-1]["global_step"]) == int(
            first["global_step"]
        )
        assert float(row["value"]) == float(first["time_s"]) and "reached return 5" in row["note"]


@needs_optuna
def test_a_population_sweep_of_a_setting_members_cannot_vary_is_one_line(tmp_path):
    out = tmp_path / "out"
    result = invoke(
        "--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(out), "--population", "2"
    )
    assert result.exit_code != 0
    assert one_line(result) == (
        "Error: sweep --population: members differ in ppo.update_epochs: a population's members "
        "may vary only ppo.learning_rate, ppo.ent_coef, ppo.vf_coef, ppo.clip_coef, "
        "ppo.max_grad_norm, ppo.gamma, ppo.gae_lambda"
    )
    assert not out.exists()


@needs_optuna
def test_invalid_sampled_configs_fail_with_their_reason_and_params_follow_the_seed(tmp_path):
    # 8 envs x 32 steps = 256 never splits into 3 or 5 minibatches: every trial fails at once
    text = """
[sweep]
trials = 3
objective = "final_return"
[sweep.params]
"ppo.learning_rate" = { low = 1e-4, high = 1e-2, log = true }
"ppo.num_minibatches" = { choices = [3, 5] }
"""
    path = write(tmp_path, text)
    runs = {}
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        result = invoke("--config", str(path), "--out", str(tmp_path / name), "--seed", seed)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert result.output.strip().splitlines()[-1] == (
            "Error: no trial completed; the notes above say why"
        )
        rows = read_trials(tmp_path / name)
        assert [row["state"] for row in rows] == ["failed"] * 3
        assert all("does not split into ppo.num_minibatches" in row["note"] for row in rows)
        assert not (tmp_path / name / "best.toml").exists()
        runs[name] = [(row[LR], row["ppo.num_minibatches"]) for row in rows]
    assert runs["a"] == runs["b"] != runs["c"]  # the sampler's seed fixes what is tried


@needs_optuna
def test_ctrl_c_keeps_the_trials_so_far_and_exits_130(tmp_path, monkeypatch):
    from fasttrain.run import runner
    from fasttrain.run.runner import RunInterrupted

    real_run = runner.run

    def run(config, out, **kwargs):
        if Path(out).name == "trial-0001":  # the runner stops at a boundary and raises this
            raise RunInterrupted(signal.SIGINT)
        return real_run(config, out, **kwargs)

    monkeypatch.setattr(runner, "run", run)
    out = tmp_path / "out"
    result = invoke(
        "--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(out), "--trials", "4"
    )
    assert result.exit_code == 130, result.output
    rows = read_trials(out)
    assert [(row["state"], row["note"]) for row in rows][1] == ("failed", "interrupted")
    assert rows[0]["state"] == "complete" and len(rows) == 2
    best = cfg.build([("best.toml", cfg.load_toml(out / "best.toml"))]).learner
    assert best.learning_rate == float(rows[0][LR])
    assert "interrupted: trials.csv and best.toml" in result.output


# ------------------------------------------------------------------------------- the watch


def spec(**sweep) -> sweepfile.Sweep:
    params = {"ppo.learning_rate": {"low": 1e-4, "high": 1e-2}}
    data = {"game": {"name": "cartpole"}, "sweep": {**sweep, "params": params}}
    return sweepfile.from_layers([("test", data)])


def row(time_s: float, value: float, step: int = 0) -> dict:
    return {"time_s": time_s, "global_step": step, "charts/episodic_return": value}


class FakeTrial:
    """Records reports; asks to prune from the ``prune_at``-th report on."""

    def __init__(self, prune_at: int = 10**9):
        self.reports, self.prune_at = [], prune_at

    def report(self, value, step):
        self.reports.append((step, value))

    def should_prune(self):
        return len(self.reports) >= self.prune_at


def test_time_to_target_values_rank_reached_trials_first_then_by_shortfall():
    s = spec(objective="time_to_target", target=100.0, budget_s=10.0)
    values = []
    for returns in ([20.0, 100.0], [20.0, 90.0], [20.0, 50.0], [math.nan, math.nan]):
        watch = sweeping.Watch(s)
        stops = [watch(row(4.0 + i, r)) for i, r in enumerate(returns)]
        assert stops == [False, watch.reached]  # the run ends at the first row that reaches
        values.append(watch.value())
    assert values == [5.0, 10.0 * 1.1, 10.0 * 1.5, math.inf]
    watch = sweeping.Watch(s)
    assert watch(row(10.0, 20.0)) is True  # the budget is up
    assert watch(row(11.0, 120.0)) is True and not watch.reached  # past the budget: not counted
    assert watch.value() == 10.0  # behind every trial that reached it in time


@needs_optuna
def test_pruning_reports_once_per_point_in_the_studys_direction():
    import optuna

    s = spec(objective="time_to_target", target=100.0, budget_s=2.0)  # a point every 0.1 s
    trial = FakeTrial()
    watch = sweeping.Watch(s, trial)
    for time_s, value in ((0.01, math.nan), (0.02, 10.0), (0.05, 50.0), (0.12, 40.0)):
        watch(row(time_s, value))
    # no report before an episode ended; one per point (the first row in it); best so far
    assert trial.reports == [(0, 2.0 * 1.9), (1, 2.0 * 1.5)]

    s = spec(objective="final_return", budget_s=2.0)
    watch = sweeping.Watch(s, FakeTrial(prune_at=2))
    watch(row(0.05, 30.0))
    with pytest.raises(optuna.TrialPruned, match="behind the median"):
        watch(row(0.15, 10.0))
    assert watch.trial.reports == [(0, 30.0), (1, 30.0)]  # the best mean so far: maximised
    assert watch.value() == 20.0  # while the value is the mean of the last 0.1 s: 30 and 10


@needs_optuna
@pytest.mark.parametrize(
    "objective, first_prune",
    [("time_to_target", sweeping.POINTS // 4), ("final_score", sweeping.POINTS // 2)],
)
def test_median_pruning_waits_a_quarter_for_time_to_target_and_half_for_final(
    objective, first_prune
):
    import optuna

    target = {"target": 1.0} if objective == "time_to_target" else {}
    settings = spec(objective=objective, budget_s=10.0, **target).settings
    direction = sweepfile.OBJECTIVES[objective]
    good, bad = (1.0, 100.0) if direction == "minimize" else (100.0, 1.0)
    study = optuna.create_study(direction=direction, pruner=sweeping.make_pruner(settings, optuna))
    for _ in range(5):  # the trials the median is taken over
        trial = study.ask()
        for point in range(sweeping.POINTS):
            trial.report(good, point)
        study.tell(trial, good)
    trial = study.ask()
    pruned = []
    for point in range(sweeping.POINTS):
        trial.report(bad, point)
        pruned.append(trial.should_prune())
    assert pruned.index(True) == first_prune
    nop = sweeping.make_pruner(
        spec(objective=objective, budget_s=10.0, pruner="none", **target).settings, optuna
    )
    assert isinstance(nop, optuna.pruners.NopPruner)


def test_final_values_are_the_mean_of_the_rows_in_the_last_twentieth():
    s = spec(objective="final_return", budget_s=2.0)  # a twentieth: 0.1 s
    watch = sweeping.Watch(s)
    assert watch.value() == -math.inf  # no episode ended yet
    for time_s, value in ((0.5, 90.0), (1.0, 10.0), (1.05, math.nan), (1.08, 20.0)):
        watch(row(time_s, value))
    assert watch.value() == 15.0  # 10 and 20; 90 is older than 0.1 s before the last row
    watch(row(1.5, math.nan))  # a row without an ended episode keeps the window
    assert watch.value() == 15.0
    watch(row(1.6, 40.0))
    assert watch.value() == 40.0
    assert "final return 40 (mean of the last 1 rows" in watch.note()
    # without a time limit the window is a twentieth of total_timesteps (150,000 here: 7,500)
    watch = sweeping.Watch(spec(objective="final_return"))
    for step, value in ((140_000, 5.0), (143_000, 7.0), (150_000, 9.0)):
        watch(row(float(step), value, step))
    assert watch.value() == 8.0


# ------------------------------------------------------------------------------- study.db


@pytest.fixture(scope="module")
def one_trial(tmp_path_factory):
    """A sweep folder holding one finished trial of FINAL_RETURN (its first trial)."""
    folder = tmp_path_factory.mktemp("one-trial")
    out = folder / "out"
    result = invoke(
        "--config", str(write(folder, FINAL_RETURN)), "--out", str(out), "--trials", "1"
    )
    assert result.exit_code == 0, result.output
    return out


def copy_of(one_trial: Path, tmp_path: Path, sql: str = "") -> Path:
    """A copy of ``one_trial`` whose study.db has had ``sql`` run on it, as a user might."""
    out = tmp_path / "out"
    shutil.copytree(one_trial, out)
    with sqlite3.connect(out / "study.db") as db:
        db.executescript(sql)
    db.close()
    return out


def continue_sweep(tmp_path: Path, out: Path, *args: str):
    return invoke("--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(out), *args)


@needs_optuna
def test_a_study_of_another_sampler_seed_or_without_its_record_is_refused_before_any_trial(
    one_trial, tmp_path
):
    out = copy_of(one_trial, tmp_path)
    result = continue_sweep(tmp_path, out, "--seed", "5")
    assert result.exit_code == 1
    assert one_line(result) == (
        f"Error: {out / 'study.db'} holds another sweep: its sweep.seed is 0 (this sweep: 5); "
        "choose another --out"
    )
    # a study without the record of its sweep (an older fasttrain's) cannot be checked
    out = copy_of(one_trial, tmp_path / "b", "DELETE FROM study_user_attributes;")
    result = continue_sweep(tmp_path, out)
    assert result.exit_code == 1
    assert one_line(result) == (
        f"Error: {out / 'study.db'} holds another sweep: it records no fasttrain sweep "
        "settings, params and sampler seed; choose another --out"
    )
    assert not (out / "trial-0001").exists()


@needs_optuna
@pytest.mark.parametrize(
    "distribution, expected",
    [
        ('{"name": "Nope", "attributes": {}}', "{db}: Unknown distribution class: Nope"),
        (  # a distribution Optuna reads, but not this sweep's
            '{"name": "FloatDistribution", "attributes": '
            '{"low": 0.5, "high": 0.9, "log": false, "step": null}}',
            "{db} holds another sweep: its trial 0 drew ppo.learning_rate from FloatDistribution("
            "high=0.9, log=False, low=0.5, step=None) (this sweep: FloatDistribution(high=0.01, "
            "log=True, low=0.0001, step=None)); choose another --out",
        ),
    ],
)
def test_a_study_whose_trials_name_another_distribution_is_refused_in_one_line(
    one_trial, tmp_path, distribution, expected
):
    sql = f"UPDATE trial_params SET distribution_json = '{distribution}';"
    out = copy_of(one_trial, tmp_path, sql)
    result = continue_sweep(tmp_path, out)
    assert result.exit_code == 1
    assert one_line(result) == "Error: " + expected.format(db=out / "study.db")
    assert not (out / "trial-0001").exists()


@needs_optuna
@pytest.mark.parametrize(
    "table, expected",
    [
        ("trials", "(sqlite3.IntegrityError) no"),  # the first ask: before any trial runs
        ("trial_values", "refused to store how trial 1 ended"),  # Optuna drops that write
    ],
)
def test_a_study_whose_trigger_aborts_a_write_ends_in_one_line(
    one_trial, tmp_path, table, expected
):
    sql = f"CREATE TRIGGER t BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'no'); END;"
    out = copy_of(one_trial, tmp_path, sql)
    result = continue_sweep(tmp_path, out, "--trials", "3")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == f"Error: {out / 'study.db'}: {expected}"
    assert (out / "trial-0001").exists() == (table == "trial_values")
    assert not (out / "trial-0002").exists()  # the sweep ended there


# ------------------------------------------------------------------------------- bad input


def test_missing_optuna_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now raises ImportError
    result = invoke("--config", str(write(tmp_path, FINAL_RETURN)), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert one_line(result) == "Error: fasttrain sweep needs optuna: pip install 'fasttrain[sweep]'"
    assert not (tmp_path / "o").exists()


def test_run_refuses_a_sweep_file_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["run", "--config", str(write(tmp_path, FINAL_RETURN))])
    assert result.exit_code == 1
    assert "[sweep] is read by `fasttrain sweep --config FILE`" in one_line(result)
    with pytest.raises(ConfigError, match=r"\[sweep\] is read by `fasttrain sweep"):
        cfg.load(write(tmp_path, FINAL_RETURN))


def test_importing_fasttrain_does_not_import_optuna():
    code = (
        "import sys, fasttrain, fasttrain.cli, fasttrain.sweep; sys.exit('optuna' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0

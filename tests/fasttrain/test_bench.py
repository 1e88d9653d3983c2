"""``fasttrain bench`` smoke runs in a subprocess at tiny sizes: structure of the JSON and PNG.

Speed is never asserted here; only that every figure is there, positive, finite and ordered.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import click
import pytest

from fasttrain import config as cfg
from fasttrain.bench import measure, parse_num_envs, stages
from fasttrain.bench.plan import make_plan
from fasttrain.bench.report import Results, machine_info, report, seed_spread
from fasttrain.bench.stages import targets_stage

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = [
    "--quick",
    "--game",
    "snake",
    "--backend",
    "python",
    "--backend",
    "cpu",
    "--num-envs",
    "8,16",
    "--repeats",
    "2",
    "--seconds",
    "0.05",
    "--train-iterations",
    "1",
    "--train-num-envs",
    "8",
    "--threads",
    "1",
]


def run_bench(*args, timeout=300):
    """``fasttrain bench ARGS``, its training rows eager: with no C++ compiler in view,
    run.compile = auto does not compile Snake's 50M-step default for one timed iteration."""
    return subprocess.run(
        [sys.executable, "-m", "fasttrain.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CXX": "/nonexistent/c++"},
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    json_path, png_path = folder / "bench.json", folder / "bench.png"
    done = run_bench(*TINY, "--json", str(json_path), "--plot", str(png_path))
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(json_path.read_text()), png_path


def test_json_rows_have_every_figure(tiny_run):
    _, data, _ = tiny_run
    rows = data["results"]
    assert rows
    for row in rows:
        for key in ("game", "kind", "backend", "num_envs", "sps_median", "sps_min", "sps_max"):
            assert key in row, (key, row)
        assert row["kind"] in ("env", "train", "baseline", "peer", "ceiling")
        for key in ("sps_median", "sps_min", "sps_max"):
            assert math.isfinite(row[key]) and row[key] > 0, row
        assert row["sps_min"] <= row["sps_median"] <= row["sps_max"], row
        assert row["num_envs"] >= 1


def test_json_covers_the_sweep_baseline_and_speedups(tiny_run):
    _, data, _ = tiny_run
    rows = data["results"]
    env = {(r["backend"], r["num_envs"]) for r in rows if r["kind"] == "env"}
    assert env == {("python", 8), ("python", 16), ("cpu", 8), ("cpu", 16)}
    (baseline,) = [r for r in rows if r["kind"] == "baseline"]
    assert (baseline["game"], baseline["backend"], baseline["num_envs"]) == ("snake", "python", 1)
    for row in rows:
        if row["kind"] == "env":
            assert row["speedup_vs_baseline"] == pytest.approx(
                row["sps_median"] / baseline["sps_median"]
            )
    assert data["compile"] == []  # --quick times no compile in fresh processes, and says so
    (note,) = [s for s in data["skipped"] if s["what"] == "compile"]
    assert "--quick" in note["reason"]


def test_quick_has_one_ppo_train_row_and_its_ceiling(tiny_run):
    """--quick's one training row (PPO on its first game) and its ceiling, each timed phase
    non-zero; every learner's rows: test_training_stage_... below."""
    _, data, _ = tiny_run
    assert not [s for s in data["skipped"] if s["what"].startswith("train snake")]
    (train,) = [r for r in data["results"] if r["kind"] == "train"]
    (ceiling,) = [r for r in data["results"] if r["kind"] == "ceiling"]
    assert train["algo"] == ceiling["algo"] == "ppo" and train["game"] == "snake"
    # each timed phase took time (the fractions sum to 1 by construction: no check there)
    assert all(0 < train[k] < 1 for k in ("time_env", "time_forward", "time_learn"))
    assert 0 <= train["time_other"] < 1 and train["sps_median"] > 0
    assert data["settings"]["learners"] == ["ppo"] and data["settings"]["train_games"] == ["snake"]


def test_quick_defaults_to_snake_and_cartpole_cpu_rows_and_all_widens_it(tmp_path):
    from fasttrain import games
    from fasttrain.learners import LEARNERS

    quick = cartpole_plan(tmp_path, game_names=())
    assert quick.games == ["snake", "cartpole"] and quick.backends == ["cpu"]
    assert quick.train_games == ("snake",) and quick.learners == ("ppo",)
    assert not quick.compile_times and quick.target_games == {"cartpole": ("return", (475.0,))}
    assert quick.target_budget_s["sb3"] == 20.0 and quick.target_seeds == 1
    assert cartpole_plan(tmp_path, game_names=("all",)).games == games.names()
    full = cartpole_plan(tmp_path, game_names=(), quick=False)
    assert full.games == games.names() and full.backends == ["python", "cpu"]
    assert full.learners == tuple(LEARNERS) and full.compile_times


def test_the_compile_stage_times_a_cold_then_a_warm_first_step(tmp_path):
    plan = dataclasses.replace(env_plan("cartpole", ("cpu",)), compile_times=True)
    results = Results()
    stages.compile_stage(plan, results, str(tmp_path / "cache"))
    assert not results.skipped, results.skipped
    (compiled,) = results.compiles
    assert (compiled["game"], compiled["backend"]) == ("cartpole", "cpu")
    assert compiled["cold_first_step_s"] > 0 and compiled["warm_first_step_s"] > 0


def test_a_trainer_crash_fails_bench_in_one_line(monkeypatch):
    """A broken trainer is an error with its cause, not a skip note beside the other figures."""
    from click.testing import CliRunner

    from fasttrain.bench import stages
    from fasttrain.cli import main

    def broken(*args, **kwargs):
        raise RuntimeError("the trainer broke")

    monkeypatch.setattr(stages, "bench_train", broken)
    result = CliRunner().invoke(
        main, ["bench", "--quick", "--game", "cartpole", "--backend", "cpu", "--no-targets"]
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert lines == ["Error: train cartpole failed: RuntimeError: the trainer broke"]


@pytest.mark.parametrize(
    "module, backend, what",
    [
        ("gymnasium", "gymnasium-sync", "peer gymnasium"),
        ("stable_baselines3", "sb3-ppo", "peer stable-baselines3"),
    ],
)
def test_json_peer_rows_or_a_skip_note(tiny_run, module, backend, what):
    _, data, _ = tiny_run
    peers = [r for r in data["results"] if r["kind"] == "peer" and r["backend"] == backend]
    skipped = [s["what"] for s in data["skipped"]]
    if importlib.util.find_spec(module) is not None:
        assert peers and all(r["game"] == "CartPole-v1" for r in peers)
    else:
        assert not peers and what in skipped


def test_quick_leaves_snake_targets_out_and_says_so(tiny_run):
    _, data, _ = tiny_run
    assert data["targets"] == []  # --game snake: no cartpole row, so no SB3 row either
    (note,) = [s for s in data["skipped"] if s["what"] == "targets snake"]
    assert "--quick" in note["reason"]
    assert data["settings"]["targets"]["games"] == {} and data["settings"]["targets"]["seeds"] == 1


def test_json_records_the_machine_and_threads(tiny_run):
    _, data, _ = tiny_run
    machine = data["machine"]
    assert machine["cpu"] and machine["cpu_count"] >= 1
    assert "gpu" in machine
    for name in ("python", "numpy", "numba", "torch"):
        assert machine["versions"][name]
    assert machine["threads"]["numba"] == 1 and machine["threads"]["torch"] == 1


def test_table_lists_every_row(tiny_run):
    done, data, _ = tiny_run
    header = next(ln for ln in done.stdout.splitlines() if ln.startswith("game "))
    assert "SPS median" in header and "speedup" in header
    assert done.stdout.count("snake ") >= len([r for r in data["results"] if r["game"] == "snake"])


def test_plot_is_a_png(tiny_run):
    _, _, png_path = tiny_run
    assert png_path.read_bytes()[:8] == PNG_MAGIC
    assert png_path.stat().st_size > 10_000  # axes, lines and text, not an empty canvas


@pytest.mark.parametrize(
    "args, message",
    [
        (["--game", "nope"], "unknown game 'nope'; valid: "),
        (["--num-envs", "64,x"], "comma-separated list of positive integers"),
        (["--num-envs", "0"], "comma-separated list of positive integers"),
        (["--threads", "100000"], "NUMBA_NUM_THREADS"),
        (["--backend", "gpu"], "'gpu' is not one of 'python', 'cpu', 'cuda'"),
        (["--device", "cpu", "--backend", "cuda"], "--backend cuda needs --device cuda"),
        (["--targets-only", "--no-targets"], "leave nothing to measure"),
        (["--targets-only", "--plot", "x.png"], "--targets-only leaves out"),
    ],
)
def test_bad_input_fails_before_measuring(args, message, tmp_path):
    json_path = tmp_path / "out.json"
    done = run_bench(*args, "--json", str(json_path), timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert "bench:" not in done.stderr  # no measurement started
    assert not json_path.exists()


def test_device_cuda_without_gpu_says_what_is_missing():
    from fasttrain.kernels.cuda import cuda_problem

    problem = cuda_problem()
    if problem is None:
        pytest.skip("a usable CUDA GPU is present")
    done = run_bench("--device", "cuda", timeout=60)
    assert done.returncode == 2
    assert problem in done.stderr


def test_backend_selection_and_the_python_size_cap(tmp_path):
    json_path = tmp_path / "out.json"
    args = [
        "--quick",
        "--game",
        "snake",
        "--backend",
        "python",
        "--num-envs",
        "8,8192",
        "--repeats",
        "1",
        "--seconds",
        "0.05",
        "--train-iterations",
        "1",
        "--train-num-envs",
        "8",
        "--threads",
        "1",
        "--no-targets",  # backend selection only; time-to-target has its own tests
    ]
    done = run_bench(*args, "--json", str(json_path))
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(json_path.read_text())
    env = {(r["backend"], r["num_envs"]) for r in data["results"] if r["kind"] == "env"}
    assert env == {("python", 8)}  # no cpu rows; 8192 envs is over the reference's cap
    assert data["compile"] == []
    assert any("num_envs=8192" in s["what"] for s in data["skipped"])


def test_parse_num_envs_sorts_and_dedupes():
    assert parse_num_envs(None, None, "256,64,64") == [64, 256]
    assert parse_num_envs(None, None, None) is None


# ------------------------------------------------------------------------------- time to target


def cartpole_plan(tmp_path, **options):
    """``make_plan`` on cartpole (cpu, quick, 1 thread, JSON in ``tmp_path``) with ``options``
    over those defaults."""
    defaults = dict(
        game_names=("cartpole",),
        device="cpu",
        num_envs=None,
        backend_names=(),
        quick=True,
        json_path=str(tmp_path / "bench.json"),
        plot_path=None,
        threads=1,
        repeats=None,
        seconds=None,
        train_iterations=None,
        train_num_envs=None,
        seed=0,
    )
    return make_plan(**{**defaults, **options})


def target_plan(tmp_path, **changes):
    """A targets-only plan on cartpole (cpu, 1 thread, 1 seed) with ``changes`` applied."""
    plan = cartpole_plan(tmp_path, targets=True, targets_only=True)
    return dataclasses.replace(plan, target_seeds=1, **changes)


def test_seed_spread_is_the_median_with_unreached_seeds_as_infinitely_slow():
    assert seed_spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert seed_spread([4.0, 1.0, 2.0, 10.0])["median"] == 3.0
    assert seed_spread([5.0, None, 1.0]) == {"median": 5.0, "min": 1.0, "max": None}
    assert seed_spread([None, None, 1.0]) == {"median": None, "min": 1.0, "max": None}


def test_target_stage_times_cartpole_and_sb3_and_reports_them(tmp_path, capsys):
    budget, target = 20.0, 25.0  # a random policy's mean return is about 22
    plan = target_plan(
        tmp_path,
        target_games={"cartpole": ("return", (target,))},
        sb3_target=target if importlib.util.find_spec("stable_baselines3") else None,
        target_budget_s={"cartpole": budget, "sb3": budget},
    )
    results = Results()
    targets_stage(plan, results)
    assert not results.skipped, results.skipped
    ours = results.targets[0]
    assert (ours["game"], ours["learner"], ours["metric"], ours["target"]) == (
        "cartpole",
        "ppo",
        "return",
        target,
    )
    (run,) = ours["runs"]
    assert run["reached"] and run["ended"] == "target" and run["seed"] == 0
    assert 0 < ours["seconds_median"] == run["seconds"] <= run["train_s"] <= budget + 5
    assert ours["steps_median"] == run["steps"] > 0
    assert ours["seeds_reached"] == 1 and run["best"] >= target
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert "time to target" in out and "median s" in out and "vs SB3" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["results"] == [] and data["targets"][0]["seconds_median"] == run["seconds"]
    if plan.sb3_target is None:
        return
    sb3 = results.targets[1]
    assert (sb3["game"], sb3["learner"], sb3["target"]) == ("CartPole-v1", "sb3-ppo", target)
    assert sb3["seeds_reached"] == 1 and 0 < sb3["seconds_median"] <= budget + 5
    expected = sb3["seconds_median"] / ours["seconds_median"]
    assert data["targets"][0]["speedup_vs_sb3"] == pytest.approx(expected)
    assert f"{expected:.1f}x faster" in out or f"{1 / expected:.1f}x slower" in out


def test_a_target_not_reached_in_the_budget_reads_not_reached(tmp_path, capsys, monkeypatch):
    # CartPole's default 150k steps can end inside 1 s on a fast CPU (~200k steps/s): given
    # 10**9, only the budget ends the run (eager: so long a run would compile under "auto")
    build = cfg.build
    endless = (
        "test",
        {"game": {"cartpole": {"ppo": {"total_timesteps": 10**9}}}, "run": {"compile": "off"}},
    )
    monkeypatch.setattr(cfg, "build", lambda layers: build([*layers, endless]))
    plan = target_plan(
        tmp_path,
        target_games={"cartpole": ("return", (1e6,))},  # above CartPole's 500
        sb3_target=None,
        target_budget_s={"cartpole": 1.0},
    )
    results = Results()
    targets_stage(plan, results)
    (row,) = results.targets
    (run,) = row["runs"]
    assert not run["reached"] and run["seconds"] is None and run["ended"] == "budget"
    assert 1.0 <= run["train_s"] < 10 and run["total_steps"] > 0
    assert row["seconds_median"] is None and row["steps_median"] is None
    assert row["seeds_reached"] == 0 and 0 < row["best"] <= 500
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert f"not reached in 1 s (best {row['best']:.3g})" in out
    assert json.loads((tmp_path / "bench.json").read_text())["targets"][0]["seconds_median"] is None


def test_sb3_time_to_target_reports_seconds_at_a_rollout_end():
    pytest.importorskip("stable_baselines3")
    from fasttrain.bench.sb3_target import ZOO_CARTPOLE, ZOO_N_ENVS, sb3_time_to_target

    run = sb3_time_to_target(30.0, seed=0, budget_s=20.0)
    assert run["reached"] and run["ended"] == "target"
    assert 0 < run["seconds"] <= run["train_s"] <= 25
    assert run["steps"] > 0 and run["steps"] % (ZOO_N_ENVS * ZOO_CARTPOLE["n_steps"]) == 0
    assert run["best"] >= 30.0 and run["total_steps"] >= run["steps"]


# ------------------------------------------------------------------------------- agent games


def env_plan(game: str, backends: tuple[str, ...]):
    return make_plan(
        game_names=(game,),
        device="cpu",
        num_envs=[4],
        backend_names=backends,
        quick=True,
        json_path=None,
        plot_path=None,
        threads=1,
        repeats=3,
        seconds=0.01,
        train_iterations=None,
        train_num_envs=None,
        seed=0,
        targets=False,
    )


@pytest.mark.parametrize("backends", [("cpu",), ("python", "cpu"), ("python",)])
def test_env_stage_adds_the_pufferlib_arena_row_on_cpu(monkeypatch, backends):
    calls = []

    def fake_bench_env(game, backend, num_envs, repeats, seconds, seed=0, params=None):
        calls.append((game, backend, num_envs, params))
        return [100.0, 300.0, 200.0], 4096 * num_envs

    monkeypatch.setattr(stages, "bench_env", fake_bench_env)
    results = Results()
    stages.env_stage(env_plan("arena", backends), results, "arena")
    sweep = [(b, 4, None) for b in backends]
    puffer = [("cpu", 4, stages.PUFFER_ARENA)] if "cpu" in backends else []
    assert [c[1:] for c in calls] == sweep + puffer
    assert all(c[0] == "arena" for c in calls)
    assert len(results.rows) == len(calls)
    for row in results.rows[: len(sweep)]:
        assert row["note"] == "random actions, agent-steps/s (8 agents per env)"
    if puffer:
        row = results.rows[-1]
        assert (row["game"], row["kind"], row["backend"], row["num_envs"]) == (
            "arena",
            "env",
            "cpu",
            4,
        )
        assert "PufferLib" in row["note"] and "256 snakes" in row["note"]
        assert row["sps_median"] == 200.0 and row["mem_bytes"] == 4096 * 4
    assert stages.PUFFER_ARENA["num_snakes"] == 256  # PufferLib's Ocean Snake settings
    assert (stages.PUFFER_ARENA["width"], stages.PUFFER_ARENA["height"]) == (640, 360)


def test_env_stage_single_agent_game_has_no_extra_row(monkeypatch):
    calls = []

    def fake_bench_env(game, backend, num_envs, repeats, seconds, seed=0, params=None):
        calls.append(params)
        return [1.0], 1

    monkeypatch.setattr(stages, "bench_env", fake_bench_env)
    results = Results()
    stages.env_stage(env_plan("snake", ("cpu",)), results, "snake")
    assert calls == [None]
    (row,) = results.rows
    assert row["note"] == "random actions"  # env-steps: no agents note


@pytest.mark.parametrize(
    "backends, sizes", [(("cpu",), stages.QUICK_SWEEP["python"]), (("python", "cpu"), [4])]
)
def test_peer_rows_are_sized_like_the_python_rows_even_without_them(monkeypatch, backends, sizes):
    """--backend cpu leaves the python rows out; the Gymnasium peer rows keep their sizes."""
    pytest.importorskip("gymnasium")
    timed = []
    monkeypatch.setattr(stages, "bench_gymnasium", lambda n, *a: timed.append(n) or [1.0])
    monkeypatch.setattr(stages, "bench_sb3", lambda *a: [1.0])
    results = Results()
    stages.peer_stage(env_plan("cartpole", backends), results)
    assert timed == list(sizes)
    assert [r["num_envs"] for r in results.rows if r["backend"] == "gymnasium-sync"] == sizes


def test_minatar_games_get_the_minatar_package_as_their_peer_row(monkeypatch):
    """The baseline stage of a MinAtar game also times the package it was ported from (a real
    short timing: its steps are counted), and its env rows say how many times faster they are."""
    pytest.importorskip("minatar")
    from fasttrain.bench.report import add_speedups

    calls = []
    real = measure.time_repeats
    monkeypatch.setattr(
        measure,
        "time_repeats",
        lambda run, steps, *a, **k: calls.append(steps) or real(run, steps, *a, **k),
    )
    results = Results()
    stages.baseline_stage(env_plan("minatar-breakout", ("cpu",)), results, "minatar-breakout")
    baseline, peer = results.rows
    assert (peer["kind"], peer["backend"], peer["num_envs"]) == ("peer", "minatar", 1)
    assert calls == [1, 1] and peer["sps_median"] > 0
    env = dict(baseline, kind="env", backend="cpu", sps_median=peer["sps_median"] * 250, note="x")
    rows = [baseline, peer, env]
    add_speedups(rows)
    assert env["speedup_vs_peer"] == pytest.approx(250) and env["note"].endswith(
        "250x the minatar package"
    )
    snake = Results()
    monkeypatch.setattr(stages, "bench_baseline", lambda *a: [1.0])
    stages.baseline_stage(env_plan("snake", ("cpu",)), snake, "snake")
    assert [r["kind"] for r in snake.rows] == ["baseline"]


# ------------------------------------------------------------------------------- recurrent cores


def train_plan(tmp_path, cores=("lstm",)):
    """A small cartpole plan for the training rows of every learner (and the rows at other
    settings, which --quick leaves out): 8 envs, 1 iteration, 1 repeat, 1 thread."""
    from fasttrain.learners import LEARNERS

    plan = cartpole_plan(
        tmp_path, repeats=1, train_iterations=1, train_num_envs=8, targets=False, cores=cores
    )
    return dataclasses.replace(plan, quick=False, learners=tuple(LEARNERS))


def test_make_plan_keeps_the_cores_in_order_once(tmp_path):
    from fasttrain.bench.plan import RECURRENT_CORES
    from fasttrain.models import CORES

    assert RECURRENT_CORES == tuple(c for c in CORES if c != "none")
    plan = train_plan(tmp_path, cores=("gru", "lstm", "gru"))
    assert plan.cores == ("gru", "lstm") and plan.settings()["cores"] == ["gru", "lstm"]
    assert train_plan(tmp_path, cores=()).settings()["cores"] == []
    with pytest.raises(click.BadParameter, match="unknown core 'rnn'; valid: lstm, gru"):
        train_plan(tmp_path, cores=("rnn",))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--core", "rnn"], "'rnn' is not one of 'lstm', 'gru'"),
        (["--core", "none"], "'none' is not one of 'lstm', 'gru'"),
        (["--targets-only", "--core", "lstm"], "--targets-only leaves out"),
    ],
)
def test_bad_core_fails_before_measuring(args, message):
    done = run_bench(*args, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "bench:" not in done.stderr
    assert len([ln for ln in done.stderr.splitlines() if ln.startswith("Error")]) == 1


def test_training_stage_adds_a_recurrent_ppo_row_beside_the_feed_forward_one(
    tmp_path, capsys, monkeypatch
):
    from fasttrain import device as devices

    monkeypatch.setattr(devices, "cpp_compiler", lambda: None)  # the PufferLib row stays eager
    plan = train_plan(tmp_path)
    results = Results()
    stages.training_stage(plan, results, "cartpole")
    assert not results.skipped, results.skipped
    keys = [(r["kind"], r["algo"], r["core"], r["settings"]) for r in results.rows]
    assert len(set(keys)) == len(keys)  # no two rows share kind, algo, core and settings
    # the default config's rows (CartPole also has a row at PufferLib's settings)
    rows = {k[:3]: r for k, r in zip(keys, results.rows, strict=True) if k[3] == "default"}
    ff, lstm = rows["train", "ppo", "none"], rows["train", "ppo", "lstm"]
    assert ("ceiling", "ppo", "lstm") in rows and ("ceiling", "ppo", "none") in rows
    assert results.rows.index(lstm) > results.rows.index(rows["train", "dqn", "none"])
    for row in (ff, lstm):
        assert math.isfinite(row["sps_median"]) and row["sps_median"] > 0
        assert row["num_envs"] == 8 and row["game"] == "cartpole"
    assert ff["note"].startswith("ppo: env ") and lstm["note"].startswith("ppo+lstm: env ")
    assert rows["ceiling", "ppo", "lstm"]["note"].startswith("ppo+lstm: learner only")
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert "ppo: env " in out and "ppo+lstm: env " in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["settings"]["cores"] == ["lstm"]
    trains = [
        (r["algo"], r["core"], r["settings"]) for r in data["results"] if r["kind"] == "train"
    ]
    puffer, overlapped = (row[0] for row in stages.EXTRA_TRAIN_ROWS["cartpole"])
    assert trains == [
        ("ppo", "none", "default"),
        ("dqn", "none", "default"),
        ("pqn", "none", "default"),
        ("ppo", "lstm", "default"),
        ("ppo", "none", puffer),
        ("ppo", "none", overlapped),
    ]


def test_a_core_the_config_does_not_fit_is_skipped_in_one_line(tmp_path, monkeypatch):
    from fasttrain.learners import LEARNERS

    # cartpole's 16-step rollout does not split into sequences of 5 steps
    ppo = dataclasses.replace(LEARNERS["ppo"], bench={"bptt_horizon": 5})
    monkeypatch.setitem(LEARNERS, "ppo", ppo)
    results = Results()
    stages.train_rows(train_plan(tmp_path), results, "cartpole", "ppo", "lstm")
    assert results.rows == []
    (skip,) = results.skipped
    assert skip["what"] == "train cartpole ppo+lstm"
    assert "bptt_horizon" in skip["reason"] and "\n" not in skip["reason"]


def test_cartpole_has_a_row_at_pufferlibs_settings(monkeypatch):
    """The extra CartPole row trains PufferLib's sizes, its note and JSON name them, and
    ``--train-num-envs`` does not resize it (it does the default row)."""
    from fasttrain import device as devices

    monkeypatch.setattr(devices, "cpp_compiler", lambda: None)  # eager: no compile in a test
    plan = make_plan(
        game_names=("cartpole",), device="cpu", num_envs=None, backend_names=(), quick=False,
        json_path=None, plot_path=None, threads=1, repeats=1, seconds=0.05,
        train_iterations=1, train_num_envs=8, targets=False, targets_only=False, cores=(),
        seed=0,
    )  # fmt: skip
    results = Results()
    stages.training_stage(plan, results, "cartpole")
    quick = Results()  # --quick leaves the row at other settings out
    stages.training_stage(dataclasses.replace(plan, quick=True), quick, "cartpole")
    assert {r["settings"] for r in quick.rows} == {"default"}
    trains = {r["settings"]: r for r in results.rows if r["kind"] == "train" and r["algo"] == "ppo"}
    names = [row[0] for row in stages.EXTRA_TRAIN_ROWS["cartpole"]]  # synchronous, overlapped
    assert set(trains) == {"default", *names}
    for name in names:
        puffer = trains.pop(name)
        assert (puffer["num_envs"], puffer["batch_size"]) == (1024, 65_536)
        assert "PufferLib" in puffer["note"] and "(num_envs set)" not in puffer["note"]
    assert trains["default"]["num_envs"] == 8 and "(num_envs set)" in trains["default"]["note"]
    ceilings = [r for r in results.rows if r["kind"] == "ceiling" and "PufferLib" in r["note"]]
    assert len(ceilings) == 2 and all(c["num_envs"] == 1024 for c in ceilings)

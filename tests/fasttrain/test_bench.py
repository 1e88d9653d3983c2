"""``fasttrain bench`` (fasttrain/bench/__init__.py): smoke runs in a subprocess at tiny sizes
(the structure of the JSON and PNG) and options refused before anything is measured. What each
part does alone: tests/fasttrain/bench/test_<module>.py.

Speed is never asserted here; only that every figure is there, positive, finite and ordered.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from fasttrain import device
from fasttrain.bench.report import MATMULS
from tests.cli import cli_in_process

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
    non-zero; every learner's rows: test_training_stage_... in bench/test_stages.py."""
    _, data, _ = tiny_run
    assert not [s for s in data["skipped"] if s["what"].startswith("train snake")]
    (train,) = [r for r in data["results"] if r["kind"] == "train"]
    (ceiling,) = [r for r in data["results"] if r["kind"] == "ceiling"]
    assert train["algo"] == ceiling["algo"] == "ppo" and train["game"] == "snake"
    # each timed phase took time (the fractions sum to 1 by construction: no check there)
    assert all(0 < train[k] < 1 for k in ("time_env", "time_forward", "time_learn"))
    assert 0 <= train["time_other"] < 1 and train["sps_median"] > 0
    assert data["settings"]["learners"] == ["ppo"] and data["settings"]["train_games"] == ["snake"]


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
    classes = [name for name, _ in device.CPU_CLASSES] + ["baseline"]
    assert machine["cpu_class"] in classes and machine["torch_cpu"]
    rates = machine["matmul_gflops"]  # the measured peak a learner's rate is read against
    assert set(rates) == {f"{m} {t}" for m in MATMULS for t in ("fp32", "bf16")}
    assert all(rate > 0 for rate in rates.values())


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
    done = cli_in_process("bench", *args, "--json", str(json_path), cwd=tmp_path)
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


@pytest.mark.parametrize(
    "args, message",
    [
        (["--core", "rnn"], "'rnn' is not one of 'lstm', 'gru'"),
        (["--core", "none"], "'none' is not one of 'lstm', 'gru'"),
        (["--targets-only", "--core", "lstm"], "--targets-only leaves out"),
    ],
)
def test_bad_core_fails_before_measuring(args, message, tmp_path):
    done = cli_in_process("bench", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "bench:" not in done.stderr
    assert len([ln for ln in done.stderr.splitlines() if ln.startswith("Error")]) == 1


# ------------------------------------------------------------------ signals during --learning


def test_a_signal_during_the_learning_suite_exits_with_its_code(monkeypatch, tmp_path, capfd):
    """Between runs a signal ends the suite at once (nothing unsaved to lose); a run stopped by
    one saved first (``RunInterrupted``): either way one line and exit 143 / 130, not click's
    "Aborted!" and exit 1."""
    import fasttrain.bench as bench_module
    from fasttrain.run.runner import RunInterrupted

    exits = []
    monkeypatch.setattr(bench_module.os, "_exit", exits.append)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    again = (
        f"every run keeps its last checkpoint; the same command continues the suite in {tmp_path}"
    )
    with bench_module.suite_signals(tmp_path):
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
        os.kill(os.getpid(), signal.SIGINT)
    assert exits == [143, 130]
    assert capfd.readouterr().err == (
        f"interrupted (SIGTERM): {again}\ninterrupted (SIGINT): {again}\n"
    )
    for signum, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        with pytest.raises(SystemExit) as stopped, bench_module.suite_signals(tmp_path):
            raise RunInterrupted(signum)
        assert stopped.value.code == code
        assert capfd.readouterr().err == f"interrupted ({signum.name}): {again}\n"
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # given back


@pytest.mark.slow
def test_sigterm_during_a_learning_run_saves_and_exits_143(tmp_path):
    from fasttrain.run import checkpoint
    from tests.cli import finish, start_cli

    args = ["bench", "--learning", "--game", "cartpole", "--seeds", "0", "--steps", "100000000"]
    sets = ["run.compile=off", "model.hidden=32", "run.torch_threads=1", "run.numba_threads=1"]
    proc = start_cli(*args, "--out", tmp_path, *[a for s in sets for a in ("--set", s)])
    rows = tmp_path / "cartpole-ppo-seed0" / "metrics.csv"
    deadline = time.monotonic() + 120
    while not (rows.exists() and rows.stat().st_size) and proc.poll() is None:
        assert time.monotonic() < deadline, "no metrics row in time"
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    result = finish(proc)
    assert result.returncode == 143, result.stderr[-1500:]
    assert result.stderr.strip().splitlines() == [
        "interrupted (SIGTERM): every run keeps its last checkpoint; the same command continues "
        f"the suite in {tmp_path}"
    ]
    assert checkpoint.load(tmp_path / "cartpole-ppo-seed0")["global_step"] > 0
    summary = json.loads((tmp_path / "cartpole-ppo-seed0" / "summary.json").read_text())
    assert summary["interrupted"] is True

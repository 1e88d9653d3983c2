"""``fasttrain bench`` smoke runs in a subprocess at tiny sizes: structure of the JSON and PNG.

Speed is never asserted here; only that every figure is there, positive, finite and ordered.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import pytest

from fasttrain.bench import parse_num_envs, time_repeats

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = [
    "--quick",
    "--game",
    "snake",
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
    return subprocess.run(
        [sys.executable, "-m", "fasttrain.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
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
    (compiled,) = data["compile"]
    assert compiled["backend"] == "cpu"
    assert compiled["cold_first_step_s"] > 0 and compiled["warm_first_step_s"] > 0


def test_json_train_rows_or_a_skip_note(tiny_run):
    _, data, _ = tiny_run
    skipped = [s["what"] for s in data["skipped"]]
    for algo, what in (("ppo", "train snake"), ("dqn", "train snake dqn")):
        trains = [r for r in data["results"] if r["kind"] == "train" and r["algo"] == algo]
        if trains:
            (train,) = trains
            assert [r["algo"] for r in data["results"] if r["kind"] == "ceiling"].count(algo) == 1
            split = [train[k] for k in ("time_env", "time_forward", "time_learn", "time_other")]
            assert all(0 <= f <= 1 for f in split)
        else:
            assert what in skipped


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


def test_time_repeats_counts_env_steps():
    calls = []

    def run(n):
        calls.append(n)
        sum(range(2000 * n))

    sps = time_repeats(run, steps_per_call=10, repeats=3, seconds=0.01)
    assert len(sps) == 3 and all(s > 0 for s in sps)
    assert calls[0] == 1  # warm-up first, outside the timings

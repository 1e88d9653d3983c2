"""``fasttrain bench``: throughput of games, training, a per-step baseline and peers, in one run.

Every figure is the median of ``repeats`` timed runs after a warm-up (min and max go in the
JSON). Rows, by ``kind``:

- ``env``: env-steps/s of ``VecEnv.step`` with random actions drawn beforehand, per game, backend
  (``python`` reference, ``cpu``, ``cuda`` when used) and ``num_envs``. Compilation happens before
  timing; it is measured on its own as time to first step in fresh subprocesses, with an empty
  cache (cold) and then the filled one (warm).
- ``baseline``: one env on the ``python`` backend with a per-step torch MLP forward, a tensor
  made from a copy of the observation and ``action.item()``: the loop of the trainers fasttrain
  replaces. Every fasttrain row shows its speedup over this row of the same game.
- ``train`` and ``ceiling``: PPO and DQN SPS with the default config and the learner-only
  ceiling, from ``fasttrain.ppo.benchmark_training`` and ``fasttrain.dqn.benchmark_training``
  (``algo`` in the JSON; skipped with a note while one does not exist).
- ``peer``: Gymnasium's CartPole sync vector env and Stable-Baselines3 PPO on CartPole, when
  installed.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import click

# Default num_envs sweeps per backend; the python reference steps envs in a Python loop.
FULL_SWEEP = {
    "python": [1, 16, 64, 256],
    "cpu": [64, 256, 1024, 4096, 16384],
    "cuda": [4096, 65536, 262144, 1048576, 4194304],  # up to 2**22
}
QUICK_SWEEP = {"python": [64], "cpu": [256, 4096], "cuda": [4096, 262144]}
# The python reference steps ~18k env-steps/s: larger sweeps would take minutes per step.
PYTHON_MAX_ENVS = 4096
# One benchmark_training call builds a trainer and runs a warm-up iteration, the timed iterations
# and the learner ceiling, so training repeats are whole calls and there are fewer of them.
# --quick trains 64 envs instead of the default config's batch, which alone takes a minute here.
FULL = dict(
    repeats=5,
    seconds=1.0,
    train_iterations=10,
    train_repeats=3,
    train_num_envs=None,
    sb3_n_steps=2048,
)
QUICK = dict(
    repeats=3,
    seconds=0.25,
    train_iterations=1,
    train_repeats=1,
    train_num_envs=64,
    sb3_n_steps=128,
)
ACTION_POOL_BYTES = 16 << 20  # random actions drawn beforehand and cycled, at most this much
TRAIN_KEYS = ("sps", "time_env", "time_forward", "time_learn", "time_other", "ceiling_sps")

# Time to first step of a fresh process; run with FASTTRAIN_CACHE_DIR set by the caller.
_FIRST_STEP = r"""
import json, sys, time
start = time.perf_counter()
import fasttrain
imported = time.perf_counter()
env = fasttrain.make(sys.argv[1], num_envs=int(sys.argv[3]), backend=sys.argv[2], seed=0)
env.step(env.actions)  # the zeroed action buffer holds valid actions
env.core.backend.synchronize()
print(json.dumps({"import_s": imported - start, "first_step_s": time.perf_counter() - imported}))
"""


# ---------------------------------------------------------------- MEASURING


def time_repeats(run, steps_per_call: int, repeats: int, seconds: float, sync=lambda: None):
    """env-steps/s of ``repeats`` timed runs of about ``seconds`` each, after a warm-up.

    ``run(n)`` makes ``n`` calls that each advance ``steps_per_call`` env-steps.
    """
    run(1)  # warm-up: first-call costs (caches, lazy allocation) stay out of the timings
    sync()
    calls, elapsed = 1, 0.0
    while elapsed < seconds / 4:  # calibrate the number of calls per repeat
        start = time.perf_counter()
        run(calls)
        sync()
        elapsed = time.perf_counter() - start
        if elapsed < seconds / 4:
            calls *= 2
    per_repeat = max(1, round(calls * seconds / max(elapsed, 1e-9)))
    sps = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(per_repeat)
        sync()
        sps.append(per_repeat * steps_per_call / (time.perf_counter() - start))
    return sps


def bench_env(game: str, backend: str, num_envs: int, repeats: int, seconds: float, seed=0):
    """env-steps/s of ``VecEnv.step`` with pre-drawn random actions, and the env's buffer bytes.

    The actions are in range by construction, so the step skips the host-side range check that
    would cost a synchronisation per step on cuda (the CPU backends check inside the kernel).
    """
    import torch

    import fasttrain

    env = fasttrain.make(game, num_envs=num_envs, backend=backend, seed=seed)
    rows = max(8, min(1024, ACTION_POOL_BYTES // (8 * num_envs)))
    generator = torch.Generator().manual_seed(seed)
    pool = torch.randint(0, env.num_actions, (rows, num_envs), generator=generator)
    pool = pool.to(env.device)
    cursor = [0]

    def run(n):
        i = cursor[0]
        for _ in range(n):
            env.step(pool[i], check=False)
            i = (i + 1) % rows
        cursor[0] = i

    sps = time_repeats(run, num_envs, repeats, seconds, env.core.backend.synchronize)
    return sps, sum(a.nbytes for a in env.core.arrays.values())


def baseline_policy(obs_shape, num_actions: int):
    """The small MLP of the per-step baseline: Flatten, Linear(obs, 64), ReLU, Linear(64, A)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(math.prod(obs_shape), 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, num_actions),
    )


def bench_baseline(game: str, repeats: int, seconds: float, seed=0):
    """Steps/s of one python-backend env driven step by step, the way older trainers did."""
    import numpy as np
    import torch

    import fasttrain

    env = fasttrain.make(game, num_envs=1, backend="python", seed=seed)
    policy = baseline_policy(env.obs_shape, env.num_actions)
    state = {"obs": env.obs.numpy()}

    def run(n):
        obs = state["obs"]
        for _ in range(n):
            x = torch.as_tensor(obs.copy(), dtype=torch.float32)
            with torch.no_grad():
                logits = policy(x)
            action = torch.distributions.Categorical(logits=logits).sample()
            next_obs, reward, terminated, truncated = env.step(np.array([action.item()]))
            reward.item(), terminated.item(), truncated.item()
            obs = next_obs.numpy()
        state["obs"] = obs

    return time_repeats(run, 1, repeats, seconds)


def bench_compile(game: str, backend: str, cache: str, threads: int) -> dict:
    """Time to first step in a fresh process: cold (empty cache), then warm (cache filled)."""
    environ = dict(os.environ, FASTTRAIN_CACHE_DIR=cache, NUMBA_NUM_THREADS=str(threads))
    out = {}
    for label in ("cold", "warm"):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_STEP, game, backend, "8"],
            env=environ,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{label} subprocess failed: {tail}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        out[f"{label}_first_step_s"] = figures["first_step_s"]
        out[f"{label}_import_s"] = figures["import_s"]
    return out


def bench_train(
    game: str, device: str, iterations: int, repeats: int, num_envs=None, seed=0, algo: str = "ppo"
):
    """Results of ``repeats`` calls of ``fasttrain.<algo>.benchmark_training`` (each warms up)."""
    import importlib

    benchmark_training = importlib.import_module(f"fasttrain.{algo}").benchmark_training

    results = []
    for _ in range(repeats):
        result = benchmark_training(game, device, iterations, num_envs=num_envs, seed=seed)
        missing = [key for key in TRAIN_KEYS if key not in result]
        if missing:
            raise KeyError(f"benchmark_training returned no {', '.join(missing)}")
        results.append(result)
    return results


def bench_gymnasium(num_envs: int, repeats: int, seconds: float, seed=0):
    """env-steps/s of Gymnasium's CartPole-v1 sync vector env with pre-drawn random actions."""
    import gymnasium
    import numpy as np

    envs = gymnasium.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
    envs.reset(seed=seed)
    rows = max(8, min(1024, ACTION_POOL_BYTES // (8 * num_envs)))
    pool = np.random.default_rng(seed).integers(0, 2, (rows, num_envs))
    cursor = [0]

    def run(n):
        i = cursor[0]
        for _ in range(n):
            envs.step(pool[i])
            i = (i + 1) % rows
        cursor[0] = i

    try:
        return time_repeats(run, num_envs, repeats, seconds)
    finally:
        envs.close()


def bench_sb3(n_steps: int, repeats: int, seed=0, n_envs=8):
    """Steps/s of Stable-Baselines3 PPO (default MlpPolicy) on CartPole, one rollout+update each."""
    import gymnasium
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(n_envs)])
    model = PPO("MlpPolicy", venv, n_steps=n_steps, device="cpu", seed=seed, verbose=0)
    batch = n_steps * n_envs
    model.learn(batch)  # warm-up iteration
    sps = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.learn(batch, reset_num_timesteps=False)
        sps.append(batch / (time.perf_counter() - start))
    venv.close()
    return sps


# ---------------------------------------------------------------- REPORTING


def make_row(game, kind, backend, num_envs, sps, note="", **extra) -> dict:
    """A result row: median, min and max of the per-repeat figures."""
    return {
        "game": game,
        "kind": kind,
        "backend": backend,
        "num_envs": int(num_envs),
        "sps_median": float(statistics.median(sps)),
        "sps_min": float(min(sps)),
        "sps_max": float(max(sps)),
        "repeats": len(sps),
        "speedup_vs_baseline": None,
        "note": note,
        **extra,
    }


def gpu_memory_note(nbytes) -> str:
    """``", 1.2 GiB GPU"`` for a byte count, or ``""`` when there is none (CPU runs)."""
    return "" if nbytes is None else f", {nbytes / 2**30:.2f} GiB GPU"


def add_speedups(rows: list[dict]) -> None:
    """Fill ``speedup_vs_baseline`` of fasttrain rows from the baseline row of their game."""
    baseline = {r["game"]: r["sps_median"] for r in rows if r["kind"] == "baseline"}
    for row in rows:
        if row["kind"] in ("env", "train", "ceiling") and row["game"] in baseline:
            row["speedup_vs_baseline"] = row["sps_median"] / baseline[row["game"]]


def human(x: float) -> str:
    """1234567 -> '1.23M'."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def format_table(header: list[str], body: list[list[str]]) -> str:
    """Left-aligned text columns, numbers right-aligned."""
    widths = [max(len(str(r[k])) for r in [header, *body]) for k in range(len(header))]
    lines = []
    for row in [header, *body]:
        cells = []
        for cell, width, name in zip(row, widths, header, strict=True):
            numeric = name in (
                "num_envs",
                "SPS median",
                "min",
                "max",
                "speedup",
                "cold s",
                "warm s",
            )
            cells.append(str(cell).rjust(width) if numeric else str(cell).ljust(width))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def results_table(rows: list[dict]) -> str:
    header = ["game", "kind", "backend", "num_envs", "SPS median", "min", "max", "speedup", "note"]
    body = []
    for r in rows:
        speedup = r["speedup_vs_baseline"]
        body.append(
            [
                r["game"],
                r["kind"],
                r["backend"],
                r["num_envs"],
                human(r["sps_median"]),
                human(r["sps_min"]),
                human(r["sps_max"]),
                "" if speedup is None else f"{speedup:.1f}x",
                r["note"],
            ]
        )
    return format_table(header, body)


def compile_table(compiles: list[dict]) -> str:
    header = ["game", "backend", "cold s", "warm s", "note"]
    body = [
        [
            c["game"],
            c["backend"],
            f"{c['cold_first_step_s']:.2f}",
            f"{c['warm_first_step_s']:.2f}",
            f"time to first step after import (import {c['warm_import_s']:.2f} s)",
        ]
        for c in compiles
    ]
    return format_table(header, body)


def machine_info(threads: int) -> dict:
    """CPU, cores, GPU, library versions and thread counts of this run."""
    import numba
    import numpy
    import torch

    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None
            )
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    versions = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
    }
    for name in ("fasttrain", "gymnasium", "stable_baselines3", "matplotlib"):
        try:
            versions[name] = __import__(name).__version__
        except (ImportError, AttributeError):
            versions[name] = None
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "gpu": gpu,
        "platform": platform.platform(),
        "versions": versions,
        "threads": {
            "numba": numba.get_num_threads(),
            "torch": torch.get_num_threads(),
            "requested": threads,
        },
    }


def write_json_atomic(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".bench-", suffix=".json.tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_plot(path: str, rows: list[dict], machine: dict) -> None:
    """PNG of env-steps/s against num_envs, one line per game and backend, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    lines: dict[tuple, list] = {}
    for r in rows:
        if r["kind"] == "env" or (r["kind"] == "peer" and r["backend"] == "gymnasium-sync"):
            lines.setdefault((r["game"], r["backend"]), []).append(r)
    for (game, backend), points in sorted(lines.items()):
        points.sort(key=lambda r: r["num_envs"])
        x = [r["num_envs"] for r in points]
        (line,) = ax.plot(
            x, [r["sps_median"] for r in points], marker="o", label=f"{game} / {backend}"
        )
        if len(points) > 1:
            ax.fill_between(
                x,
                [r["sps_min"] for r in points],
                [r["sps_max"] for r in points],
                alpha=0.15,
                color=line.get_color(),
            )
    for r in rows:
        if r["kind"] == "baseline":
            ax.plot(
                [1],
                [r["sps_median"]],
                marker="*",
                markersize=12,
                linestyle="none",
                label=f"{r['game']} / baseline (per-step torch, 1 env)",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("num_envs")
    ax.set_ylabel("env-steps per second (median)")
    threads = machine["threads"]["numba"]
    ax.set_title(
        f"fasttrain bench: env-only throughput\n{machine['cpu']}, {threads} threads", fontsize=10
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".bench-", suffix=".png.tmp", dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- COMMAND


def parse_num_envs(ctx, param, value):
    """``"64,256"`` -> ``[64, 256]``; None stays None (the per-backend defaults)."""
    if value is None:
        return None
    try:
        sizes = [int(part) for part in value.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes):
        raise click.BadParameter(
            f"expected a comma-separated list of positive integers such as 64,256, got {value!r}"
        )
    return sorted(set(sizes))


@click.command()
@click.option(
    "--game",
    "game_names",
    multiple=True,
    type=click.UNPROCESSED,
    help="Game to measure (repeatable; default: every registered game).",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda", "auto"]),
    default="auto",
    show_default=True,
    help="Device for training; cuda also adds cuda env rows.",
)
@click.option(
    "--num-envs",
    "num_envs",
    callback=parse_num_envs,
    default=None,
    help="Comma-separated num_envs sweep for every backend (default: per backend).",
)
@click.option(
    "--backend",
    "backend_names",
    multiple=True,
    type=click.Choice(["python", "cpu", "cuda"]),
    help="Backend for the env rows (repeatable; default: python, cpu, and cuda with "
    "--device cuda).",
)
@click.option("--quick", is_flag=True, help="Short sweep and timings (under 2 minutes).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every figure and the machine to this JSON file.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG of env-steps/s against num_envs (needs the plot extra).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Numba and torch threads (default: every core Numba sees).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Timed repeats per figure (default 5, quick 3).",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds per timed repeat (default 1, quick 0.25).",
)
@click.option(
    "--train-iterations",
    type=click.IntRange(min=1),
    default=None,
    hidden=True,
    help="PPO iterations per training call (default 10, quick 1).",
)
@click.option(
    "--train-num-envs",
    type=click.IntRange(min=1),
    default=None,
    help="num_envs for the training rows instead of the game's default config.",
)
@click.option("--seed", type=int, default=0, show_default=True)
def bench(
    game_names,
    device,
    num_envs,
    backend_names,
    quick,
    json_path,
    plot_path,
    threads,
    repeats,
    seconds,
    train_iterations,
    train_num_envs,
    seed,
):
    """Measure env-steps/s, PPO SPS, a per-step baseline and peers, and print a table."""
    import numba
    import torch

    from fasttrain import games as registry
    from fasttrain.kernels.cuda import cuda_problem

    # ---- validate everything before measuring anything
    valid = registry.names()
    for name in game_names:
        if name not in valid:
            raise click.BadParameter(
                f"unknown game {name!r}; valid: {', '.join(valid)}", param_hint="--game"
            )
    game_names = list(dict.fromkeys(game_names)) or valid
    if device in ("cuda", "auto"):
        problem = cuda_problem()
        if device == "cuda" and problem:
            raise click.UsageError(f"--device cuda is not usable here: {problem}")
        device = "cpu" if problem else "cuda"
    if plot_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.UsageError(
                "--plot needs matplotlib: pip install 'fasttrain[plot]'"
            ) from None
    for path in (json_path, plot_path):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise click.UsageError(f"folder of {path!r} does not exist")
    max_threads = numba.config.NUMBA_NUM_THREADS
    if threads is not None and threads > max_threads:
        raise click.BadParameter(
            f"at most {max_threads} (NUMBA_NUM_THREADS) here, got {threads}", param_hint="--threads"
        )
    threads = threads or max_threads
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    preset = QUICK if quick else FULL
    repeats = repeats or preset["repeats"]
    seconds = seconds or preset["seconds"]
    train_iterations = train_iterations or preset["train_iterations"]
    train_repeats = min(repeats, preset["train_repeats"])
    train_num_envs = train_num_envs or preset["train_num_envs"]
    backends = ["python", "cpu"] + (["cuda"] if device == "cuda" else [])
    if backend_names:
        if "cuda" in backend_names and device != "cuda":
            raise click.UsageError("--backend cuda needs --device cuda (or auto on a GPU)")
        backends = [b for b in backends if b in backend_names]
    sweep = {b: num_envs or (QUICK_SWEEP if quick else FULL_SWEEP)[b] for b in backends}

    rows: list[dict] = []
    compiles: list[dict] = []
    skipped: list[dict] = []

    def skip(what, reason):
        skipped.append({"what": what, "reason": reason})
        click.echo(f"  skipped {what}: {reason}", err=True)

    def progress(text):
        click.echo(f"bench: {text}", err=True)

    started = time.perf_counter()
    machine = machine_info(threads)
    cache = tempfile.mkdtemp(prefix="fasttrain-bench-cache-")
    previous_cache = os.environ.get("FASTTRAIN_CACHE_DIR")
    try:
        # ---- compile time, cold then warm, in fresh processes sharing one new cache
        for game in game_names:
            for backend in [b for b in backends if b != "python"]:
                progress(f"{game} {backend}: compile time (cold and warm cache)")
                try:
                    figures = bench_compile(game, backend, cache, threads)
                    compiles.append({"game": game, "backend": backend, **figures})
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    skip(f"compile {game} {backend}", str(exc))
        # this process reuses the cache just filled, so no compile lands inside a timing
        os.environ["FASTTRAIN_CACHE_DIR"] = cache

        for game in game_names:
            # ---- env-only throughput
            for backend in backends:
                for n in sweep[backend]:
                    if backend == "python" and n > PYTHON_MAX_ENVS:
                        skip(f"env {game} python num_envs={n}", f"the uncompiled reference "
                             f"runs at most {PYTHON_MAX_ENVS} envs here")  # fmt: skip
                        continue
                    progress(f"{game} {backend} num_envs={n}: env-steps/s")
                    sps, nbytes = bench_env(game, backend, n, repeats, seconds, seed)
                    note = "random actions"
                    if backend == "cuda":
                        note += f", {nbytes / 2**20:,.0f} MiB of GPU buffers"
                    rows.append(make_row(game, "env", backend, n, sps, note, mem_bytes=nbytes))
            # ---- per-step baseline
            progress(f"{game}: per-step baseline")
            sps = bench_baseline(game, repeats, seconds, seed)
            note = "python backend, 1 env, per-step torch MLP, copy + .item()"
            rows.append(make_row(game, "baseline", "python", 1, sps, note))
            # ---- end-to-end training and the learner-only ceiling, per algorithm
            for algo in ("ppo", "dqn"):
                progress(
                    f"{game} {device}: {algo.upper()} training ({train_iterations} iterations)"
                )
                what = f"train {game}" + ("" if algo == "ppo" else f" {algo}")
                try:
                    results = bench_train(
                        game, device, train_iterations, train_repeats, train_num_envs, seed, algo
                    )
                except ImportError as exc:
                    skip(what, f"fasttrain.{algo}.benchmark_training not available ({exc})")
                    continue
                except Exception as exc:  # a broken trainer should not lose the other figures
                    skip(what, f"benchmark_training failed: {exc!r}")
                    continue
                split = {k: statistics.median(r[k] for r in results) for k in TRAIN_KEYS[1:5]}
                train = make_row(
                    game,
                    "train",
                    device,
                    results[0].get("num_envs", 0),
                    [r["sps"] for r in results],
                    "{}: env {:.0%} fwd {:.0%} learn {:.0%} other {:.0%}{}{}".format(
                        algo,
                        *split.values(),
                        "" if train_num_envs is None else " (num_envs set)",
                        gpu_memory_note(results[0].get("gpu_mem_bytes")),
                    ),
                    algo=algo,
                    batch_size=results[0].get("batch_size"),
                    gpu_mem_bytes=results[0].get("gpu_mem_bytes"),
                    iterations=train_iterations,
                    **split,
                )
                ceiling = make_row(
                    game,
                    "ceiling",
                    device,
                    train["num_envs"],
                    [r["ceiling_sps"] for r in results],
                    algo=algo,
                )
                fraction = train["sps_median"] / ceiling["sps_median"]
                ceiling["fraction_reached"] = fraction
                ceiling["note"] = f"{algo}: learner only; training reaches {fraction:.0%}"
                rows += [train, ceiling]

        # ---- peers on CartPole
        try:
            import gymnasium  # noqa: F401
        except ImportError:
            skip("peer gymnasium", "gymnasium is not installed (pip install 'fasttrain[gym]')")
        else:
            for n in sweep["python"]:
                progress(f"peer gymnasium CartPole-v1 sync num_envs={n}")
                sps = bench_gymnasium(n, repeats, seconds, seed)
                rows.append(
                    make_row(
                        "CartPole-v1",
                        "peer",
                        "gymnasium-sync",
                        n,
                        sps,
                        "make_vec sync, random actions",
                    )
                )
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            skip(
                "peer stable-baselines3",
                "stable-baselines3 is not installed (pip install 'fasttrain[sb3]')",
            )
        else:
            n_steps = preset["sb3_n_steps"]
            progress(f"peer stable-baselines3 PPO CartPole-v1 (n_steps={n_steps})")
            sps = bench_sb3(n_steps, repeats, seed)
            rows.append(
                make_row(
                    "CartPole-v1",
                    "peer",
                    "sb3-ppo",
                    8,
                    sps,
                    f"PPO MlpPolicy, DummyVecEnv n_envs=8, n_steps={n_steps}",
                )
            )
    finally:
        if previous_cache is None:
            os.environ.pop("FASTTRAIN_CACHE_DIR", None)
        else:
            os.environ["FASTTRAIN_CACHE_DIR"] = previous_cache
        shutil.rmtree(cache, ignore_errors=True)

    add_speedups(rows)
    bad = [
        r
        for r in rows
        if not all(math.isfinite(r[k]) and r[k] > 0 for k in ("sps_median", "sps_min", "sps_max"))
    ]
    if bad:
        raise click.ClickException(f"non-positive or non-finite figure in {bad[0]}")

    # ---- report
    click.echo(
        f"\nfasttrain bench on {machine['cpu']} ({machine['cpu_count']} cores, "
        f"{threads} threads, GPU: {machine['gpu'] or 'none'}); "
        f"median of {repeats} x {seconds:g} s"
    )
    click.echo(results_table(rows))
    if compiles:
        click.echo("\ncompile (single fresh-process runs)")
        click.echo(compile_table(compiles))
    for s in skipped:
        click.echo(f"skipped {s['what']}: {s['reason']}")
    elapsed = time.perf_counter() - started
    machine["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    load = machine["load_average_at_start"]
    if load and load[0] > 0.5 * (machine["cpu_affinity"] or machine["cpu_count"] or 1):
        click.echo(f"note: load average {load[0]:.1f} at start; other work shared the CPU")
    click.echo(f"\ntotal {elapsed:.0f} s")
    settings = {
        "games": game_names,
        "device": device,
        "backends": backends,
        "sweep": sweep,
        "quick": quick,
        "repeats": repeats,
        "seconds_per_repeat": seconds,
        "train_iterations": train_iterations,
        "train_repeats": train_repeats,
        "train_num_envs": train_num_envs or "default config",
        "sb3_n_steps": preset["sb3_n_steps"],
        "seed": seed,
    }
    if json_path:
        write_json_atomic(
            json_path,
            {
                "fasttrain_bench_version": 1,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "elapsed_s": elapsed,
                "machine": machine,
                "settings": settings,
                "results": rows,
                "compile": compiles,
                "skipped": skipped,
            },
        )
        click.echo(f"wrote {json_path}")
    if plot_path:
        write_plot(plot_path, rows, machine)
        click.echo(f"wrote {plot_path}")

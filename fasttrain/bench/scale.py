"""``python -m fasttrain.bench.scale --json FILE``: how fasttrain uses the machine it runs on, in
one run and one JSON (what ``.ci/gpu`` runs on a GPU machine).

On any machine, the CPU thread sweep: env-only and PPO training steps/s of Snake at 1, 2, 4, ...
threads up to the cores Numba sees (``threads``; Numba and torch get the same count), and the
split ``run.torch_threads = run.numba_threads = 0`` picks. On a CUDA GPU also (``gpu``):

- ``time_to_score``: training seconds until the default Snake run (the device's presets) first
  reaches a mean score of 50, and Breakout's default run: its seconds and final return;
- ``gpu_busy``: the share of wall time the GPU was busy during a Snake training run, sampled
  from NVML every 100 ms;
- ``population``: Snake's and Breakout's presets, one seed's iteration against one of a
  population of 8 seeds (``fasttrain run --seeds``), their time ratio, steps/s and GPU busy;
- ``ppo_large_batch``: PPO steps/s on Snake with 16,384 environments;
- ``step_fixed_cost_us``: the time of one ``env.step`` at 512 environments, every game;
- ``env``: env-steps/s and the observation bytes written per second at 2^20 environments, in
  each buffer layout (``layouts``: the observations env-minor, the default; in rows as before;
  the game's state env-minor too);
- ``env_kernel_us`` (with ``rollout_cost``): one env step's kernels at a preset's env count,
  replayed from a CUDA graph, in each layout and block spread;
- ``compile``: the CUDA kernels' cold and warm time to a first step in fresh processes;
- ``registers``: the offline PTX report (registers and spills per kernel).

A figure that cannot be measured here is null, with the reason under ``skipped``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

SNAKE_SCORE = 50.0
FIXED_COST_ENVS = 512
LARGE_ENVS = 2**20
LARGE_BATCH_ENVS = 16_384
POPULATION_MEMBERS = 8  # issue 53's GPU goal: 8 seeds in at most 1.5x one seed's time
HANG_S = 120.0  # a figure running longer prints every thread's stack (then every HANG_S)


def thread_counts(most: int) -> list[int]:
    """1, 2, 4, ... up to ``most``, and ``most`` itself."""
    counts, n = [], 1
    while n < most:
        counts.append(n)
        n *= 2
    return [*counts, most]


def thread_sweep(
    most: int, seconds: float = 1.0, iterations: int = 5, num_envs: int | None = None
) -> dict:
    """Snake env-only (4,096 envs) and PPO training steps/s (its default config, or
    ``num_envs`` environments) per thread count."""
    import numba
    import torch

    from fasttrain.bench.measure import bench_env
    from fasttrain.bench.training import benchmark_training

    rows = []
    for n in thread_counts(most):
        numba.set_num_threads(n)
        torch.set_num_threads(n)
        env = statistics.median(bench_env("snake", "cpu", 4096, 3, seconds)[0])
        train = benchmark_training("ppo", "snake", "cpu", iterations, num_envs, threads=n)
        rows.append({"threads": n, "env_sps": env, "train_sps": train["sps"]})
    auto = benchmark_training("ppo", "snake", "cpu", iterations, num_envs, threads=None)
    best = max(rows, key=lambda r: r["train_sps"])
    return {
        "rows": rows,
        "auto_train_sps": auto["sps"],
        "best_fixed": best,
        "auto_vs_best": auto["sps"] / best["train_sps"],
    }


class BusySampler:
    """The GPU's NVML utilisation sampled every 100 ms while in the ``with`` block; ``share``:
    its mean as a fraction (None without NVML or a GPU)."""

    def __init__(self):
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        import torch

        while not self.done.wait(0.1):
            try:
                self.samples.append(torch.cuda.utilization())
            except Exception:  # no NVML, no GPU
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    @property
    def share(self) -> float | None:
        return statistics.fmean(self.samples) / 100 if self.samples else None


def gpu_busy_share(run_for_s: float = 20.0, graph: bool = True) -> float | None:
    """The mean NVML utilisation while Snake trains on the GPU for ``run_for_s`` seconds, its
    rollout a CUDA graph or not (``graph``: ``run.cuda_graph``)."""
    from fasttrain.config import resolve as cfg
    from fasttrain.run.runner import run

    config = cfg.from_dict(
        {"run": {"device": "cuda", "cuda_graph": graph}, "log": {"progress": False}}
    )
    with tempfile.TemporaryDirectory() as out, BusySampler() as busy:
        run(config, out=Path(out) / "run", echo=lambda *a, **k: None, on_row=timer(run_for_s))
    return busy.share


def population_cost(game: str, members: int = 8, device: str = "cuda", iterations: int = 5) -> dict:
    """``game``'s preset on ``device``: one seed's iteration (the solo trainer as a run builds
    it, CUDA graphs included) against one of a population of ``members`` seeds (``fasttrain
    run --seeds``), each member taking as many steps as the seed alone: the ratio of their
    times (issue 53's goal: 8 seeds in at most 1.5x one seed's time on a GPU), steps/s, and
    the GPU's busy share during the population's iterations."""
    import torch

    from fasttrain.config import resolve as cfg
    from fasttrain.learners import make_trainer

    config = cfg.from_dict(
        {"run": {"device": device}, "game": {"name": game}, "log": {"progress": False}}
    )

    def timed(fn) -> float:
        for _ in range(2):  # warm-ups (a graph's capture)
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / iterations

    solo = make_trainer(config, warn=lambda *_: None)
    solo_s, steps = timed(solo.iterate), solo.steps_per_iteration
    del solo
    seeds = [
        dataclasses.replace(config, run=dataclasses.replace(config.run, seed=s))
        for s in range(members)
    ]
    population = make_trainer(config, warn=lambda *_: None, members=seeds)
    with BusySampler() as busy:
        population_s = timed(population.iterate)
    return {
        "algo": config.run.algo,
        "members": members,
        "num_envs_per_member": population.n,
        "solo_iteration_ms": solo_s * 1e3,
        "population_iteration_ms": population_s * 1e3,
        "time_ratio": population_s / solo_s,
        "solo_sps": steps / solo_s,
        "population_sps": members * population.batch_size / population_s,
        "gpu_busy": busy.share if device == "cuda" else None,
    }


def timer(seconds: float):
    """An ``on_row`` that ends a run after ``seconds`` of training."""
    return lambda row: row["time_s"] >= seconds


def time_to_score(game: str, budget_s: float, target: float | None, graph: bool = True) -> dict:
    """The default run of ``game`` on the GPU: seconds to ``target`` (mean score, or None to
    run to the end), its final row, and the preset source named on the settings line; its
    rollout a CUDA graph or not (``graph``: ``run.cuda_graph``)."""
    from fasttrain.config import resolve as cfg
    from fasttrain.run.runner import run
    from fasttrain.targets import Target

    config = cfg.from_dict({"run": {"device": "cuda", "cuda_graph": graph}, "game": {"name": game}})
    goal = Target("score", target if target is not None else float("inf"), stop=target is not None)
    lines = []
    with tempfile.TemporaryDirectory() as out:

        def on_row(row):
            return goal(row) or row["time_s"] >= budget_s

        summary = run(config, out=Path(out) / "run", echo=lines.append, on_row=on_row)
    return {
        "seconds_to_target": goal.seconds,
        "steps_to_target": goal.steps,
        "final_score": summary["score"],
        "wall_s": summary["wall_s"],
        "global_step": summary["global_step"],
        "sps": summary["global_step"] / summary["wall_s"] if summary["wall_s"] else None,
        "settings_line": lines[0] if lines else None,
    }


def rollout_cost(game: str, graph: bool, iterations: int = 20) -> dict:
    """``game``'s GPU preset (PPO) with its rollout a CUDA graph or not: microseconds per
    rollout step (the horizon's wall time over its steps, the GPU's work included), the
    update's milliseconds per iteration and whole iterations' steps/s, after warm-ups."""
    import torch

    from fasttrain.config import resolve as cfg
    from fasttrain.learners import make_trainer

    config = cfg.from_dict(
        {
            "run": {"device": "cuda", "cuda_graph": graph, "algo": "ppo"},
            "game": {"name": game},
            "log": {"progress": False},
        }
    )
    trainer = make_trainer(config, warn=lambda *_: None)
    for _ in range(3):  # eager warm-up, capture, first replay
        trainer.iterate()

    def timed(fn) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / iterations

    rollout = timed(trainer.rollout)
    step0 = trainer.global_step
    iteration = timed(trainer.iterate)
    graph_held = getattr(trainer, "horizon_graph", None) is not None
    return {
        "graph": graph_held,
        "num_envs": trainer.env.num_envs,
        "num_steps": trainer.args.num_steps,
        "rollout_step_us": rollout / trainer.args.num_steps * 1e6,
        "iteration_ms": iteration * 1e3,
        "rest_ms": (iteration - rollout) * 1e3,  # advantages and the update
        "sps": (trainer.global_step - step0) / (iteration * iterations),
    }


def step_fixed_cost(game: str, steps: int = 2000) -> float:
    """Microseconds per ``env.step`` at ``FIXED_COST_ENVS`` environments on the GPU (the
    launch and the Python around it: the kernel itself is tiny there)."""
    import torch

    import fasttrain

    env = fasttrain.make(game, num_envs=FIXED_COST_ENVS, backend="cuda", seed=0)
    actions = torch.zeros(env.num_rows, dtype=torch.int64, device="cuda")
    for _ in range(100):
        env.step(actions, check=False)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(actions, check=False)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


@contextlib.contextmanager
def cuda_layout(layout: str, spread: bool = True):
    """Inside, the cuda backend gives new envs ``layout`` (``kernels.env.LAYOUTS``) and
    launches with its envs ``spread`` over the multiprocessors or not (``cuda.py``)."""
    from fasttrain.kernels import get_backend

    backend = get_backend("cuda")
    before = backend.layout, backend.spread
    backend.layout, backend.spread = layout, spread
    try:
        yield
    finally:
        backend.layout, backend.spread = before


# the games measured in every layout (the others in the default alone): each other layout is
# a compile of its own on a fresh machine, and a lease is short
LAYOUT_GAMES = ("snake", "minatar-breakout")


def env_rate(game: str, seconds: float = 1.0) -> dict:
    """env-steps/s and observation GB/s written at ``LARGE_ENVS`` environments on the GPU, in
    the default layout and, for ``LAYOUT_GAMES``, in each other (``kernels.env.LAYOUTS``: the
    env-major rows of before, the env-minor state too) under ``layouts``. A layout whose envs
    do not fit the GPU holds its one-line error instead."""
    import math

    import numpy as np

    from fasttrain import games
    from fasttrain.bench.measure import bench_env
    from fasttrain.kernels.env import LAYOUTS

    spec = games.get(game)
    params = spec.make_params()
    agents = spec.agents(params)
    obs_bytes = math.prod(spec.obs_shape(params)) * np.dtype(spec.obs_dtype).itemsize * agents
    out = {}
    layouts = LAYOUTS if game in LAYOUT_GAMES else ("obs-minor",)
    for layout in sorted(layouts, key=lambda name: name != "obs-minor"):
        try:
            with cuda_layout(layout):
                sps = statistics.median(bench_env(game, "cuda", LARGE_ENVS, 3, seconds)[0])
        except MemoryError as exc:
            out[layout] = {"error": str(exc).splitlines()[0][:200]}
            continue
        out[layout] = {"env_sps": sps, "obs_gb_per_s": sps * obs_bytes / 1e9}
    return {**out["obs-minor"], "layouts": out}


FIGURES = (
    "time_to_score",
    "gpu_busy",
    "population",
    "ppo_large_batch",
    "rollout_cost",
    "step_fixed_cost",
    "env",
    "compile",
    "registers",
    "threads",
)
# the games whose presets train with PPO (minatar-asterix and minatar-seaquest: PQN)
PPO_PRESETS = (
    "snake",
    "minatar-breakout",
    "cartpole",
    "minatar-freeway",
    "minatar-space_invaders",
    "arena",
)
MODES = {"graph": True, "eager": False}  # run.cuda_graph: the rollout replayed, or launched


# env_kernel_cost's variants: (the cuda backend's layout, spread over the multiprocessors)
KERNEL_VARIANTS = {
    "spread": ("obs-minor", True),  # the default
    "blocks_256": ("obs-minor", False),  # blocks of 256 whatever the env count (before)
    "env_major": ("env-major", True),  # the observations written in rows (before)
    "env_minor_state": ("env-minor", True),  # the game's state env-minor too
}


def env_kernel_cost(game: str, steps: int = 32, replays: int = 20) -> dict:
    """Microseconds per env step of ``game`` at its GPU preset's env count, the steps replayed
    as one CUDA graph (no launch cost: the kernels alone: the step, and the copy of env-minor
    observations into rows), in each of ``KERNEL_VARIANTS`` (``LAYOUT_GAMES``; the others
    in the default layout's two block spreads)."""
    import torch

    import fasttrain
    from fasttrain.config import resolve as cfg

    config = cfg.from_dict({"run": {"device": "cuda"}, "game": {"name": game}})
    num_envs = config.learner.num_envs
    generator = torch.Generator(device="cuda").manual_seed(0)
    out = {"num_envs": num_envs}
    for name, (layout, spread) in KERNEL_VARIANTS.items():
        if layout != "obs-minor" and game not in LAYOUT_GAMES:
            continue
        with cuda_layout(layout, spread):
            env = fasttrain.make(game, num_envs=num_envs, backend="cuda", seed=0)
            actions = torch.randint(
                0, env.num_actions, (steps, env.num_rows), device="cuda", generator=generator
            )
            graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up: load the kernels for this stream
                for t in range(steps):
                    env.step(actions[t], check=False)
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph, stream=stream):
                for t in range(steps):
                    env.step(actions[t], check=False)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - start) / (replays * steps) * 1e6
    return out


class Figures:
    """GPU figures as they are measured: ``out`` (nested by keys), the reason of each that
    failed (``skipped``), and ``save()`` after each, so a lease that ends keeps what was
    measured."""

    def __init__(self, out: dict, skipped: dict, save=None):
        self.out, self.skipped, self.save = out, skipped, save

    def put(self, keys: tuple, name: str, fn, *args, **kwargs) -> None:
        """``fn(*args)`` stored at ``out[keys...]`` (None where it failed, its reason in
        ``skipped``), then saved; a figure still running after ``HANG_S`` prints every
        thread's stack (faulthandler), so a hang in a lease says where it is."""
        start = time.perf_counter()
        faulthandler.dump_traceback_later(HANG_S, repeat=True)
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - one figure failing keeps the others
            self.skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            value = None
        finally:
            faulthandler.cancel_dump_traceback_later()
        place = self.out
        for key in keys[:-1]:
            place = place.setdefault(key, {})
        place[keys[-1]] = value
        seconds = time.perf_counter() - start
        said = "not measured" if name in self.skipped else "measured"
        print(f"{said}: {name} ({seconds:.1f} s)", flush=True)
        if self.save is not None:
            self.save()

    def both(self, keys: tuple, name: str, fn, *args, **kwargs) -> None:
        """``put`` with the rollout a CUDA graph and eagerly (``MODES``)."""
        for mode, graph in MODES.items():
            self.put((*keys, mode), f"{name} ({mode})", fn, *args, graph=graph, **kwargs)


def gpu_goals(
    games: list[str],
    skipped: dict,
    budget_s: float = 600.0,
    out: dict | None = None,
    save=None,
    skip: frozenset = frozenset(),
) -> dict:
    """Every GPU figure of the module docstring but those in ``skip`` (``skipped`` gets the
    reason of any missing); the training figures twice, with the rollout a CUDA graph and
    eagerly (``MODES``), so one run measures before and after. Each time-to-score run stops
    after ``budget_s`` seconds of training. The figures go into ``out`` as they come, and
    ``save()`` runs after each (a lease that ends keeps what was measured)."""
    from fasttrain.bench.measure import bench_compile

    out = {} if out is None else out
    f = Figures(out, skipped, save)
    if "rollout_cost" not in skip:
        for g in (g for g in PPO_PRESETS if g in games):
            f.both(("rollout_cost", g), f"rollout cost {g}", rollout_cost, g)
        for g in ("snake", "minatar-breakout", "cartpole", "minatar-space_invaders"):
            f.put(("env_kernel_us", g), f"env kernel {g}", env_kernel_cost, g)
    if "time_to_score" not in skip:
        for g, score in (("snake", SNAKE_SCORE), ("minatar-breakout", None)):
            name = f"time_to_score {g.removeprefix('minatar-')}"
            f.both(("time_to_score", g), name, time_to_score, g, budget_s, score)
    if "gpu_busy" not in skip:
        f.both(("gpu_busy",), "gpu_busy", gpu_busy_share)
    if "population" not in skip:
        for g in ("snake", "minatar-breakout"):
            f.put(("population", g), f"population {g}", population_cost, g, POPULATION_MEMBERS)
    if "ppo_large_batch" not in skip:
        out["ppo_large_batch"] = {"num_envs": LARGE_BATCH_ENVS}
        f.both(("ppo_large_batch",), "ppo_large_batch", large_batch_sps)
    if "step_fixed_cost" not in skip:
        for g in games:
            f.put(("step_fixed_cost_us", g), f"fixed cost {g}", step_fixed_cost, g)
    if "env" not in skip:
        for g in games:
            f.put(("env", g), f"env {g}", env_rate, g)
    if "compile" not in skip:
        with tempfile.TemporaryDirectory() as cache:
            for g in games[:3]:
                f.put(("compile", g), f"compile {g}", bench_compile, g, "cuda", cache, 1)
    if "registers" not in skip:
        f.put(("registers",), "registers", registers)
    return out


def large_batch_sps(graph: bool) -> float:
    """PPO steps/s on Snake at ``LARGE_BATCH_ENVS`` environments (``fasttrain bench``)."""
    from fasttrain.bench.training import benchmark_training

    sections = {"run": {"cuda_graph": graph}}
    return benchmark_training("ppo", "snake", "cuda", 5, LARGE_BATCH_ENVS, sections=sections)["sps"]


def registers() -> list[str]:
    """The offline PTX report, one line per kernel, for the GPU's compute capability."""
    import torch

    from fasttrain import games
    from fasttrain.kernels.ptx import report

    cc = torch.cuda.get_device_capability()
    return report([games.get(name) for name in games.names()], (cc[0], cc[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fasttrain.bench.scale", description=__doc__)
    parser.add_argument("--json", required=True, help="write every figure here")
    parser.add_argument("--threads", type=int, default=None, help="most threads (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per env timing")
    parser.add_argument("--iterations", type=int, default=5, help="timed training iterations")
    parser.add_argument("--train-num-envs", type=int, default=None, help="training envs")
    parser.add_argument(
        "--budget-s", type=float, default=600.0, help="most training seconds per time-to-score run"
    )
    parser.add_argument(
        "--skip",
        default="",
        help=f"comma-separated figures not to measure (to fit a short lease): {', '.join(FIGURES)}",
    )
    opts = parser.parse_args(argv)
    skip = frozenset(filter(None, opts.skip.split(",")))
    if skip - set(FIGURES):
        parser.error(
            f"unknown --skip {', '.join(sorted(skip - set(FIGURES)))}; valid: {', '.join(FIGURES)}"
        )
    import numba
    import torch

    from fasttrain import games
    from fasttrain.bench.report import machine_info
    from fasttrain.kernels import cuda_available
    from fasttrain.run.rundir import json_safe

    most = opts.threads or numba.config.NUMBA_NUM_THREADS
    skipped: dict = {}
    result = {"machine": machine_info(most), "skipped": skipped}

    def save():
        Path(opts.json).write_text(json.dumps(json_safe(result), indent=2) + "\n")

    if torch.cuda.is_available() and cuda_available():
        result["gpu"] = {}
        gpu_goals(games.names(), skipped, opts.budget_s, result["gpu"], save, skip)
    else:
        result["gpu"] = None
        skipped["gpu"] = "no CUDA GPU usable by torch and numba-cuda here"
    if "threads" not in skip:
        result["threads"] = thread_sweep(most, opts.seconds, opts.iterations, opts.train_num_envs)
        save()
        for row in result["threads"]["rows"]:
            print(
                f"threads {row['threads']:>3}: env {row['env_sps']:>14,.0f} env-steps/s  "
                f"train {row['train_sps']:>10,.0f} SPS"
            )
        auto = result["threads"]["auto_vs_best"]
        print(f"the automatic split trains at {auto:.0%} of the best fixed one")
    save()
    print(json.dumps(json_safe(result.get("gpu")), indent=1))
    for name, why in skipped.items():
        print(f"not measured: {name}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

"""What ``fasttrain bench`` prints and writes: rows, speedups, tables, machine, JSON, plot."""

from __future__ import annotations

import io
import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import click

from fasttrain.bench.plan import Plan
from fasttrain.run.rundir import RunError, write_atomic

NUMERIC_COLUMNS = (
    "num_envs",
    "SPS median",
    "min",
    "max",
    "speedup",
    "cold s",
    "warm s",
    "median s",
    "steps",
    "seeds",
    "vs SB3",
)
SB3_LEARNER = "sb3-ppo"  # the learner of the Stable-Baselines3 rows


@dataclass
class Results:
    """What the stages measured, in order: result rows, compile times, and what was skipped."""

    rows: list[dict] = field(default_factory=list)  # make_row dicts
    compiles: list[dict] = field(default_factory=list)  # game, backend, cold/warm figures
    targets: list[dict] = field(default_factory=list)  # make_target_row dicts
    skipped: list[dict] = field(default_factory=list)  # what, reason

    def skip(self, what: str, reason: str) -> None:
        """Record a figure left out and say so at once on stderr."""
        self.skipped.append({"what": what, "reason": reason})
        click.echo(f"  skipped {what}: {reason}", err=True)


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


def finite_or_none(x) -> float | None:
    """``x`` as a float, or None when it is missing, NaN or infinite (JSON has no inf)."""
    return None if x is None or not math.isfinite(x) else float(x)


def seed_spread(values: list) -> dict:
    """Median, min and max over seeds of a time to target, where None (not reached) counts as
    infinitely slow: the median is a number only when more than half the seeds reached it, and
    None comes back for a figure that is not one."""
    times = [math.inf if v is None else float(v) for v in values]
    figures = {"median": statistics.median(times), "min": min(times), "max": max(times)}
    return {k: finite_or_none(v) for k, v in figures.items()}


def target_run(seed, seconds, steps, best, last, train_s, total_steps, ended) -> dict:
    """One seed's run towards a target: training seconds and env steps at the first reach (None:
    not reached), the best and last values seen, how long it trained and why it ``ended``
    (``target``, ``budget`` or ``total_timesteps``)."""
    return {
        "seed": seed,
        "reached": seconds is not None,
        "seconds": finite_or_none(seconds),
        "steps": steps,
        "best": finite_or_none(best),
        "last": finite_or_none(last),
        "train_s": float(train_s),
        "total_steps": int(total_steps),
        "ended": ended,
    }


def make_target_row(game, learner, metric, value, budget_s, runs, note="", **extra) -> dict:
    """A time-to-target row over the ``target_run`` dicts of its seeds: median, min and max of
    the seconds and steps (None: not reached, see ``seed_spread``), and the best value seen."""
    seconds = seed_spread([r["seconds"] for r in runs])
    steps = seed_spread([r["steps"] for r in runs])
    bests = [r["best"] for r in runs if r["best"] is not None]
    return {
        "game": game,
        "learner": learner,
        "metric": metric,
        "target": float(value),
        "budget_s": float(budget_s),
        "seeds": [r["seed"] for r in runs],
        "seeds_reached": sum(r["reached"] for r in runs),
        **{f"seconds_{k}": v for k, v in seconds.items()},
        **{f"steps_{k}": None if v is None else int(v) for k, v in steps.items()},
        "best": max(bests) if bests else None,
        "speedup_vs_sb3": None,
        "runs": runs,
        "note": note,
        **extra,
    }


def gpu_memory_note(nbytes) -> str:
    """``", 1.2 GiB GPU"`` for a byte count, or ``""`` when there is none (CPU runs)."""
    return "" if nbytes is None else f", {nbytes / 2**30:.2f} GiB GPU"


def add_speedups(rows: list[dict]) -> None:
    """Fill ``speedup_vs_baseline`` of fasttrain rows from the baseline row of their game."""
    baseline = {r["game"]: r["sps_median"] for r in rows if r["kind"] == "baseline"}
    # a game's original (the minatar package for MinAtar games): its env rows say how many times
    peer = {r["game"]: r for r in rows if r["kind"] == "peer" and r["game"] in baseline}
    for row in rows:
        if row["kind"] in ("env", "train", "ceiling") and row["game"] in baseline:
            row["speedup_vs_baseline"] = row["sps_median"] / baseline[row["game"]]
        if row["kind"] == "env" and row["game"] in peer:
            theirs = peer[row["game"]]
            row["speedup_vs_peer"] = row["sps_median"] / theirs["sps_median"]
            row["note"] += f"; {row['speedup_vs_peer']:,.0f}x the {theirs['backend']} package"


def add_sb3_speedups(targets: list[dict]) -> None:
    """Fill ``speedup_vs_sb3`` of fasttrain rows: SB3's median seconds to the same target over
    theirs, where both reached it (``sb3_game`` of the SB3 row names the fasttrain game)."""
    sb3 = {
        (r["sb3_game"], r["metric"], r["target"]): r["seconds_median"]
        for r in targets
        if r["learner"] == SB3_LEARNER
    }
    for row in targets:
        theirs = sb3.get((row["game"], row["metric"], row["target"]))
        if row["learner"] != SB3_LEARNER and theirs is not None and row["seconds_median"]:
            row["speedup_vs_sb3"] = theirs / row["seconds_median"]


def check_figures(rows: list[dict]) -> None:
    """Fail in one line on a figure that is not positive and finite (a timing went wrong)."""
    figures = ("sps_median", "sps_min", "sps_max")
    bad = [r for r in rows if not all(math.isfinite(r[k]) and r[k] > 0 for k in figures)]
    if bad:
        raise click.ClickException(f"non-positive or non-finite figure in {bad[0]}")


# ---------------------------------------------------------------- TABLES


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
            numeric = name in NUMERIC_COLUMNS
            cells.append(str(cell).rjust(width) if numeric else str(cell).ljust(width))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def results_table(rows: list[dict]) -> str:
    """One line per result row: figures in k/M/G, speedup over the game's baseline."""
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
    """One line per compiled game and backend: time to first step, cold and warm cache."""
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


def reached_text(row: dict) -> str:
    """The median seconds, or what was reached instead: ``not reached in 60 s (best 212)``."""
    seconds = row["seconds_median"]
    if seconds is not None:
        return f"{seconds:.2f}" if seconds < 10 else f"{seconds:.1f}"
    runs = row["runs"]
    if any(r["ended"] == "budget" for r in runs):
        limit = f"{row['budget_s']:g} s"
    else:
        limit = f"{human(max(r['total_steps'] for r in runs))} steps"
    best = "none" if row["best"] is None else f"{row['best']:.3g}"
    return f"not reached in {limit} (best {best})"


def targets_table(targets: list[dict]) -> str:
    """One line per time-to-target row: median training seconds over seeds, steps, how many
    seeds reached the target and how many times faster than SB3 to the same target."""
    header = ["game", "learner", "target", "median s", "steps", "seeds", "vs SB3", "note"]
    body = []
    for r in targets:
        speedup = r["speedup_vs_sb3"]
        if speedup is None:
            versus = ""
        else:
            versus = f"{speedup:.1f}x faster" if speedup >= 1 else f"{1 / speedup:.1f}x slower"
        body.append(
            [
                r["game"],
                r["learner"],
                f"{r['metric']} {r['target']:g}",
                reached_text(r),
                "-" if r["steps_median"] is None else human(r["steps_median"]),
                f"{r['seeds_reached']}/{len(r['seeds'])}",
                versus,
                r["note"],
            ]
        )
    return format_table(header, body)


# ---------------------------------------------------------------- MACHINE


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the OS has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


# the matrix products whose rate says how near its limit a learner runs: Snake's first layer in
# an update's minibatch (8192 rows of 576 board cells into 128) and a wide MLP layer (4096 x 512
# into 512, Breakout's); fp32 always, bf16 to show whether the CPU has it natively
MATMULS = {"snake-layer-1": (8192, 576, 128), "mlp-512": (4096, 512, 512)}


def matmul_rates(seconds: float = 0.2) -> dict:
    """GFLOP/s of ``MATMULS`` in fp32 and bf16 on this CPU, with torch's threads: each product
    repeated for about ``seconds`` after one warm-up (the machine's measured peak at those
    shapes, which a learner's achieved rate is read against)."""
    import torch

    rates = {}
    for name, (m, k, n) in MATMULS.items():
        for dtype in (torch.float32, torch.bfloat16):
            a = torch.randn(m, k).to(dtype)
            b = torch.randn(k, n).to(dtype)
            torch.mm(a, b)
            count, started = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - started) < seconds or count < 2:
                torch.mm(a, b)
                count += 1
            label = "fp32" if dtype == torch.float32 else "bf16"
            rates[f"{name} {label}"] = round(2 * m * k * n * count / elapsed / 1e9, 1)
    return rates


def machine_class_line(machine: dict) -> str:
    """``avx512-bf16, torch AVX512 kernels; Snake's first layer: fp32 167.7 GFLOP/s, bf16 422.2``:
    the machine class every figure names (docs/performance.md)."""
    rates = machine.get("matmul_gflops") or {}
    fp32, bf16 = rates.get("snake-layer-1 fp32"), rates.get("snake-layer-1 bf16")
    emulated = " (emulated: FASTTRAIN_CPU)" if machine.get("cpu_emulated") else ""
    return (
        f"{machine.get('cpu_class', '?')}{emulated}, torch {machine.get('torch_cpu', '?')} "
        f"kernels; Snake's first layer: fp32 {fp32} GFLOP/s, bf16 {bf16}"
    )


def machine_info(threads: int) -> dict:
    """CPU and its class (its torch kernels, its measured matmul rates), cores, GPU, library
    versions and thread counts of this run."""
    import numba
    import numpy
    import torch

    from fasttrain import device
    from fasttrain.environ import emulated_cpu
    from fasttrain.kernels.gpu import backends_line

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
        "cpu_class": device.cpu_class(),
        "cpu_emulated": emulated_cpu() is not None,
        "torch_cpu": torch.backends.cpu.get_cpu_capability(),
        "matmul_gflops": matmul_rates(),
        "backends": backends_line(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": load_average(),
        "gpu": gpu,
        "platform": platform.platform(),
        "versions": versions,
        "threads": {
            "numba": numba.get_num_threads(),
            "torch": torch.get_num_threads(),
            "requested": threads,
        },
    }


# ---------------------------------------------------------------- FILES


def write_file(path: str, data: bytes | str, what: str) -> None:
    """``data`` to ``path`` through the one atomic writer; a failure is one line, not a trace."""
    try:
        write_atomic(path, data, what)
    except RunError as exc:
        raise click.ClickException(str(exc)) from None


def write_json(path: str, data: dict) -> None:
    """``data`` as indented JSON, written atomically."""
    write_file(path, json.dumps(data, indent=2) + "\n", "results file")


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
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png")
    finally:
        plt.close(fig)
    write_file(path, png.getvalue(), "plot")


# ---------------------------------------------------------------- REPORT


def add_peak_fractions(rows: list[dict], machine: dict) -> None:
    """Each CPU training row's learner GFLOP/s as a share of the machine's measured matmul
    rate at Snake's first layer in the precision the update ran (``matmul_rates``): how near
    its limit a preset runs."""
    rates = machine.get("matmul_gflops") or {}
    for row in rows:
        gflops, precision = row.get("learner_gflops"), row.get("precision")
        peak = rates.get(f"snake-layer-1 {precision}")
        if row["backend"] != "cpu" or not gflops or not peak:
            continue
        row["peak_fraction"] = gflops / peak
        row["note"] += f" ({gflops / peak:.0%} of the {precision} matmul peak)"


def report(plan: Plan, results: Results, machine: dict, started: float) -> None:
    """Print the tables and notes; write the JSON and the plot when the plan names them."""
    rows = results.rows
    add_speedups(rows)
    add_peak_fractions(rows, machine)
    check_figures(rows)
    add_sb3_speedups(results.targets)
    click.echo(
        f"\nfasttrain bench on {machine['cpu']} ({machine['cpu_count']} cores, "
        f"{plan.threads} threads, GPU: {machine['gpu'] or 'none'})"
        + ("" if plan.targets_only else f"; median of {plan.repeats} x {plan.seconds:g} s")
        + f"\nmachine class: {machine_class_line(machine)}"
        + f"\n{machine.get('backends') or ''}"
    )
    if rows:
        click.echo(results_table(rows))
    if results.targets:
        seeds = plan.target_seeds
        click.echo(
            "\ntime to target: training seconds until the mean of recently ended episodes first "
            f"reaches it (median of {seeds} seed{'s' * (seeds > 1)})"
        )
        click.echo(targets_table(results.targets))
    if results.compiles:
        click.echo("\ncompile (single fresh-process runs)")
        click.echo(compile_table(results.compiles))
    for s in results.skipped:
        click.echo(f"skipped {s['what']}: {s['reason']}")
    elapsed = time.perf_counter() - started
    machine["load_average_at_end"] = load_average()
    load = machine["load_average_at_start"]
    if load and load[0] > 0.5 * (machine["cpu_affinity"] or machine["cpu_count"] or 1):
        click.echo(f"note: load average {load[0]:.1f} at start; other work shared the CPU")
    click.echo(f"\ntotal {elapsed:.0f} s")
    if plan.json_path:
        data = {
            "fasttrain_bench_version": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": elapsed,
            "machine": machine,
            "settings": plan.settings(),
            "results": rows,
            "compile": results.compiles,
            "targets": results.targets,
            "skipped": results.skipped,
        }
        write_json(plan.json_path, data)
        click.echo(f"wrote {plan.json_path}")
    if plan.plot_path:
        write_plot(plan.plot_path, rows, machine)
        click.echo(f"wrote {plan.plot_path}")

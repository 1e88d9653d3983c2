"""``python -m fasttrain.bench.gpu_stages``: what a GPU window measures, as named stages with
time caps, most important first (what ``.ci/gpu`` runs). A GPU is at hand in short windows (15
minutes in all, machine start included, one command at most 10), so the first five stages fit 8
minutes on one H100/H200 and each writes its figures to ``OUT/gpu-<stage>.json`` as soon as it
has them: a window that ends early keeps what it measured.

1. ``parity``: every cuda layout against the CPU, bit for bit, at scale (the gpu-marked layout
   tests); the stages stop here if it fails.
2. ``snake-run``: ``fasttrain run --game snake --device cuda`` for 30M steps as a user sees it:
   its first lines, every warning, steps/s, the training seconds to scores 20, 40 and 50.
3. ``graph-tests``: every other gpu-marked test (PPO feed-forward and GRU graphs, PQN, both
   kinds of population, a capture made to fail).
4. ``costs``: ``python -m fasttrain.bench.scale``'s rollout and iteration cost as a graph and
   eagerly, the env kernel per layout, one env step's fixed cost, and an 8-seed population's
   iteration against one seed's.
5. ``population``: ``fasttrain run --game snake --device cuda --seeds 0-7`` end to end.

Later stages, in a second call or a later window, by name: ``games`` (every game's default
run, capped), ``time-to-score`` (Snake to 50 and Breakout's run, with the GPU's busy share),
``env-scale`` (env steps/s at 2^20 environments per layout, and 16,384-env PPO) and
``registers`` (the offline PTX report). On a CPU the run stages run too (``--device cpu``,
``--steps``): the tests check the stage list and the JSON each writes that way.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stage:
    name: str
    cap_s: int
    """the stage's time limit: past it the stage is stopped and recorded as timed out"""
    first: bool
    """one of the first stages, which fit one window together"""
    what: str


STAGES = (
    Stage("parity", 75, True, "cuda layouts against the CPU bit for bit (stop if this fails)"),
    Stage("snake-run", 120, True, "the default Snake run on cuda, 30M steps, as a user sees it"),
    Stage("graph-tests", 120, True, "every other gpu-marked test"),
    Stage("costs", 90, True, "rollout and iteration: graph vs eager; env kernel per layout"),
    Stage("population", 75, True, "fasttrain run --seeds 0-7 end to end"),
    Stage("games", 300, False, "every game's default run on cuda, capped"),
    Stage("time-to-score", 300, False, "Snake to 50 and Breakout, with the GPU's busy share"),
    Stage("env-scale", 240, False, "env steps/s at 2^20 envs per layout; 16k-env PPO"),
    Stage("registers", 120, False, "the offline PTX report: registers and spills per kernel"),
)
BY_NAME = {stage.name: stage for stage in STAGES}
FIRST_BUDGET_S = 8 * 60  # the first stages' caps together fit this (tested)
SCORES = (20, 40, 50)  # the Snake scores whose first training second snake-run reports


def choose(text: str) -> list[Stage]:
    """``first``, ``later``, ``all`` or comma-separated stage names, in ``STAGES`` order; one
    line (ValueError) naming the valid ones for anything else."""
    if text in ("first", "later", "all"):
        return [s for s in STAGES if text == "all" or s.first == (text == "first")]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        valid = ", ".join(BY_NAME)
        raise ValueError(
            f"unknown stage {', '.join(unknown) or repr(text)}; valid: first, "
            f"later, all or names: {valid}"
        )
    return [s for s in STAGES if s.name in names]


def _run(args: list[str], cap_s: float, cwd=None) -> dict:
    """``args`` run with a time limit: exit code (None: stopped at the cap), seconds, and the
    output's head and tail."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=cap_s, cwd=cwd)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    return {
        "command": " ".join(args),
        "exit": code,
        "seconds": round(time.perf_counter() - started, 1),
        "stdout": out,
        "stderr_tail": err[-3000:],
    }


def _pytest(expr: str, paths: list[str], cap_s: float) -> dict:
    result = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            "-o",
            "faulthandler_timeout=60",
            *(["-k", expr] if expr else []),
            *paths,
        ],
        cap_s,
    )
    tail = result.pop("stdout")[-3000:]
    summary = next((ln for ln in reversed(tail.splitlines()) if " in " in ln), "")
    return {**result, "summary": summary, "stdout_tail": tail}


def _first_seconds(rows: list[dict], key: str, target: float) -> float | None:
    for row in rows:
        value = float(row.get(key) or "nan")
        if not math.isnan(value) and value >= target:
            return float(row["time_s"])
    return None


def _train(args: list[str], cap_s: float, folder: Path) -> dict:
    """A ``fasttrain run`` as a user sees it: its first lines, warnings, summary and time to
    each of ``SCORES`` (from its metrics rows)."""
    result = _run(
        [
            sys.executable,
            "-m",
            "fasttrain",
            "run",
            *args,
            "--out",
            str(folder),
            "--set",
            "log.progress=false",
            "--set",
            "log.curves=false",
        ],
        cap_s,
    )
    lines = result.pop("stdout").splitlines()
    result["first_lines"] = lines[:6]
    result["warnings"] = [ln for ln in lines if ln.lstrip().lower().startswith("warning")]
    result["last_lines"] = lines[-3:]
    summaries = sorted(folder.rglob("summary.json"))
    result["summaries"] = {
        str(p.parent.relative_to(folder)) or ".": json.loads(p.read_text()) for p in summaries
    }
    metrics = folder / "metrics.csv"
    if metrics.exists():
        with open(metrics, newline="") as f:
            rows = list(csv.DictReader(f))
        result["seconds_to_score"] = {
            str(s): _first_seconds(rows, "charts/score", s) for s in SCORES
        }
    return result


def run_stage(stage: Stage, device: str, steps: int | None, scratch: Path) -> dict:
    """One stage's figures (a dict: what ran, its exit, its seconds and what it measured)."""
    tests = "tests"
    if stage.name == "parity":
        return _pytest("layout or bit_for_bit", [f"{tests}/fasttrain/kernels"], stage.cap_s)
    if stage.name == "graph-tests":
        return _pytest("not layout", [tests], stage.cap_s)
    if stage.name == "snake-run":
        many = ["--steps", str(steps or 30_000_000)]
        return _train(
            ["--game", "snake", "--device", device, *many], stage.cap_s, scratch / "snake-run"
        )
    if stage.name == "population":
        many = ["--steps", str(steps or 2_000_000)]  # per member: 16M steps in all
        return _train(
            ["--game", "snake", "--device", device, "--seeds", "0-7", *many],
            stage.cap_s,
            scratch / "population",
        )
    if stage.name == "games":
        out = {}
        for game in ("minatar-breakout", "minatar-asterix", "cartpole", "arena"):
            many = ["--steps", str(steps)] if steps else []
            out[game] = _train(
                ["--game", game, "--device", device, *many],
                stage.cap_s / 4,
                scratch / f"game-{game}",
            )
        return out
    scale = {
        "costs": "rollout_cost,population,step_fixed_cost",
        "time-to-score": "time_to_score,gpu_busy",
        "env-scale": "env,ppo_large_batch",
        "registers": "registers",
    }[stage.name]
    from fasttrain.bench.scale import FIGURES

    skip = ",".join(f for f in FIGURES if f not in scale.split(","))
    path = scratch / f"scale-{stage.name}.json"
    result = _run(
        [
            sys.executable,
            "-m",
            "fasttrain.bench.scale",
            "--json",
            str(path),
            "--budget-s",
            "60",
            "--skip",
            skip,
        ],
        stage.cap_s,
    )
    result["stdout_tail"] = result.pop("stdout")[-3000:]
    result["figures"] = json.loads(path.read_text()) if path.exists() else None
    return result


def passed(result: dict) -> bool:
    """Whether a stage's figures say it ran to the end without a failure."""
    parts = result.values() if "exit" not in result else [result]
    return all(isinstance(p, dict) and p.get("exit") == 0 for p in parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fasttrain.bench.gpu_stages",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--stages",
        default="first",
        help="first (default), later, all, or names: " + ", ".join(BY_NAME),
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="where the JSON goes")
    parser.add_argument("--device", default="cuda", help="the run stages' device")
    parser.add_argument("--steps", type=int, default=None, help="the run stages' steps")
    parser.add_argument("--list", action="store_true", help="print the stages and exit")
    opts = parser.parse_args(argv)
    try:
        stages = choose(opts.stages)
    except ValueError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    if opts.list:
        for s in STAGES:
            print(f"{s.name:14} {s.cap_s:4d} s  {'first' if s.first else 'later'}  {s.what}")
        return 0
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    with tempfile.TemporaryDirectory(prefix="fasttrain-gpu-") as scratch:
        for stage in stages:
            started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            print(f"== stage {stage.name} (cap {stage.cap_s} s): {stage.what}", flush=True)
            result = run_stage(stage, opts.device, opts.steps, Path(scratch))
            ok = passed(result)
            record = {
                "stage": stage.name,
                "cap_s": stage.cap_s,
                "started": started,
                "passed": ok,
                "result": result,
            }
            path = out / f"gpu-{stage.name}.json"
            path.write_text(json.dumps(record, indent=1, default=str))
            print(f"   {'passed' if ok else 'FAILED'}; wrote {path}", flush=True)
            if not ok:
                status = 1
                if stage.name == "parity":
                    print("   parity failed: the later stages would measure wrong results; stop")
                    break
    return status


if __name__ == "__main__":
    sys.exit(main())

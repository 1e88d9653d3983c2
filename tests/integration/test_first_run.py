"""A first run that explains itself: the compile notice on a cold cache (and none on a warm
one), the time left that leaves the compiles out, a log line and a header that fit 120 columns,
and ``--verbose`` for the wide line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

from fasttrain.config import resolve as cfg
from fasttrain.run import metrics
from fasttrain.run.command import RunRequest, run_config
from fasttrain.run.parts import Boundary, TimeLeft
from fasttrain.run.runner import run
from tests.cli import ROOT, header

NOTICE = re.compile(
    r"^compiling (?P<what>.+) for the cpu backend \(first run only; cached afterwards\)\.\.\. "
    r"(?P<seconds>\d+\.\d) s$"
)


def python(code_or_args, cache, **env):
    """``python -c CODE`` (or ``python ARGS``) with this checkout and Numba's cache in
    ``cache``; fasttrain's generated launchers go there too, so a fresh folder is a cold cache."""
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "NUMBA_CACHE_DIR": str(cache / "numba"),
        "FASTTRAIN_CACHE_DIR": str(cache / "fasttrain"),
        **env,
    }
    return subprocess.run(  # in the cache's folder: a run's default runs/ folder lands there
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=600, cwd=cache
    )


def test_a_cold_cache_says_what_compiles_and_how_long_and_a_warm_one_says_nothing(tmp_path):
    make = "import fasttrain; fasttrain.make('cartpole', num_envs=4)"
    cold = python(make, tmp_path)
    assert cold.returncode == 0, cold.stderr
    # fasttrain.make users: the notice on stderr, one line with its seconds
    assert cold.stdout == ""
    (line,) = cold.stderr.splitlines()
    assert NOTICE.match(line)["what"] == "cartpole", line
    warm = python(make, tmp_path)
    assert warm.returncode == 0 and warm.stderr == "" and warm.stdout == ""
    # a run prints through its own output, before its first line: cartpole is cached now,
    # the learner's GAE kernel is not
    args = ["--steps", "64", "--num-envs", "4", "--set", "log.curves=false"]
    first = python(["-m", "fasttrain.cli", "run", "--game", "cartpole", *args], tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [NOTICE.match(x)["what"] for x in lines[:1]] == ["learner kernel gae_env"], lines
    assert lines[1].startswith("fasttrain: cartpole on cpu | learner: ppo ([ppo] applies)"), lines
    assert "compiling" not in first.stderr
    again = python(["-m", "fasttrain.cli", "run", "--game", "cartpole", *args], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "compiling" not in again.stdout + again.stderr
    assert again.stdout.startswith("fasttrain: cartpole on cpu | learner: ppo")


def time_left_after(boundaries, planned):
    """The time left ``TimeLeft`` gives at each ``(global_step, time)`` boundary."""
    trainer = SimpleNamespace(global_step=0)
    part, out = TimeLeft(trainer, planned), []
    for step, now in boundaries:
        trainer.global_step = step
        boundary = Boundary(trainer, {}, now, False, None, True)
        part.after_iteration(boundary)
        out.append(boundary.eta)
    return out


def test_the_time_left_leaves_the_first_iteration_and_its_compiles_out():
    # the first iteration took 100 s (compiling), then 1,000 steps a second; 10,000 planned
    etas = time_left_after([(1000, 100.0), (2000, 101.0), (3000, 102.0), (10_000, 109.0)], 10_000)
    assert etas == ["--", "8s", "7s", "0s"]  # counting the compile, the second would read 6m44s
    assert metrics.time_left(8000, 1000, 1.0) == "8s"
    assert metrics.time_left(25 * 3600 + 150, 1, 1.0) == "25h02m"
    assert metrics.time_left(5, 0, 0.0) == "--" and metrics.time_left(0, 0, 0.0) == "0s"


def test_a_run_prints_lines_that_fit_and_the_header_unwraps_to_every_setting(tmp_path):
    sets = {
        "game": {"name": "snake", "snake": {"height": 6, "width": 6}},
        "ppo": {"total_timesteps": 1024, "num_envs": 8, "num_steps": 32, "ent_coef": 0.01},
        "model": {"hidden": 16},
        "run": {"torch_threads": 1, "numba_threads": 1},
        "log": {"progress": False, "interval_s": 1e-9, "curves": False},
    }
    lines = []
    run(cfg.from_dict(sets, "--set"), out=tmp_path / "run", echo=lines.append)
    text = "\n".join(lines)
    assert all(len(line) <= 120 for line in text.splitlines()), text
    steps = [line for line in text.splitlines() if line.startswith("step ")]
    assert len(steps) == 4 and steps[0].split(" | ")[2] == "ETA     --", steps
    assert all(" | ETA " in line and "forward" not in line for line in steps)
    first = header(text)
    assert first.startswith(
        "fasttrain: snake on cpu | learner: ppo ([ppo] applies) | 8 envs x 32 steps = batch 256"
    )
    for setting in ("ppo.ent_coef=0.01 (--set)", "game.snake.height=6 (--set)"):
        assert setting in first, first
    # log.wide: every loss and the time split, wider than 120 columns
    sets["log"]["wide"] = True
    lines = []
    run(cfg.from_dict(sets, "--set"), out=tmp_path / "wide", echo=lines.append)
    wide = [line for line in lines if line.startswith("step ")]
    assert wide and all("clip " in line and " forward " in line for line in wide), wide


def test_verbose_is_log_wide_from_the_command_line():
    config = run_config(RunRequest(game="snake", verbose=True))
    assert config.log.wide is True and config.sources["log.wide"] == "command line"
    assert "log.wide=True (command line)" in config.overrides()
    assert run_config(RunRequest(game="snake")).log.wide is False

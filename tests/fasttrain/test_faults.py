"""Fault injection on `fasttrain run` and `fasttrain play`: signals at random moments, kill -9,
a live run directory, full disks, corrupt or foreign checkpoints, NaN and inf, and bad input.

Each case asserts the exit code, one error line and no traceback, and that no work is lost:
the previous checkpoint keeps its bytes (or loads with finite weights), and a resumed run equals
an uninterrupted one bit for bit. Runs are CLI subprocesses with tiny settings and one thread
each (so two of them share the two cores), unless the fault needs a monkeypatch.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fasttrain import checkpoint, rundir
from fasttrain import config as cfg
from fasttrain.errors import RunError
from fasttrain.runner import run

SETS = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.ppo.num_envs=16",
    "game.snake.ppo.num_steps=8",
    "game.snake.ppo.num_minibatches=2",
    "model.hidden=32",
    "log.progress=false",
    "run.torch_threads=1",  # two runs at once share the two cores without oversubscribing
    "run.numba_threads=1",
]
ITERATION = 16 * 8  # environment steps per PPO iteration with SETS
# long enough that a signal sent within 1.5 s of the first metrics row lands mid-run
TOTAL = ITERATION * 300
RNG = random.Random(20240612)
MOMENTS = [
    {signal.SIGINT: round(RNG.uniform(0, 1.5), 2), signal.SIGTERM: round(RNG.uniform(0, 1.5), 2)}
    for _ in range(3)
]
KILL_DELAY = round(RNG.uniform(0, 1.5), 2)
TIMED = ("time_s", "sps")  # metrics.csv columns that depend on the clock, with time/*


def sets(*extra: str) -> list[str]:
    return [arg for item in (*SETS, *extra) for arg in ("--set", item)]


def command(*args) -> list[str]:
    return [sys.executable, "-m", "fasttrain.cli", *map(str, args)]


def start(*args, cwd=None) -> subprocess.Popen:
    return subprocess.Popen(
        command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )


def finish(proc: subprocess.Popen, timeout=240) -> subprocess.CompletedProcess:
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def cli(*args, cwd=None, timeout=240) -> subprocess.CompletedProcess:
    return finish(start(*args, cwd=cwd), timeout)


def cli_together(*calls) -> list[subprocess.CompletedProcess]:
    """Run several CLI calls at once (each an argument list) and wait for all of them."""
    return [finish(proc) for proc in [start(*args) for args in calls]]


def cli_pool(calls: dict, jobs: int = 3) -> dict:
    """Run CLI calls (name -> (args, cwd)) ``jobs`` at a time; their results by name."""
    pending, running, results = list(calls.items()), {}, {}
    deadline = time.monotonic() + 600
    while pending or running:
        while pending and len(running) < jobs:
            name, (args, cwd) = pending.pop(0)
            running[name] = start(*args, cwd=cwd)
        for name, proc in list(running.items()):
            if proc.poll() is not None:
                results[name] = finish(running.pop(name))
        assert time.monotonic() < deadline, f"still running: {list(running)}"
        time.sleep(0.02)
    return results


class UserErrorBug(AssertionError):
    """A fault ended in a traceback, in several lines, or with the wrong exit code."""


def one_line(result: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one error line of a CLI call that should fail with exit ``code``."""
    tail = result.stderr[-1500:]
    if "Traceback" in result.stderr:
        raise UserErrorBug(f"traceback (exit {result.returncode}):\n{tail}")
    if result.returncode != code:
        raise UserErrorBug(f"exit {result.returncode}, expected {code}:\n{tail}")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if code == 2:  # click's usage errors print Usage and Try lines above the error
        lines = [line for line in lines if not line.startswith(("Usage:", "Try '"))]
    if len(lines) != 1:
        raise UserErrorBug(f"{len(lines)} lines of error, expected one:\n{tail}")
    return lines[0]


def snapshot(folder, mtimes: bool = False) -> dict:
    """Every path under ``folder``: its bytes (and mtime) for files, None for folders."""
    folder = Path(folder)
    out = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_dir():
            out[name + "/"] = None
        else:
            out[name] = (path.read_bytes(), path.stat().st_mtime_ns if mtimes else None)
    return out


def temps(folder) -> list[str]:
    return sorted(p.name for p in Path(folder).glob(".*.tmp"))


def wait_for(predicate, timeout=120.0, poll=0.01):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def has_rows(out: Path) -> bool:
    path = out / "metrics.csv"
    return path.exists() and path.stat().st_size > 0  # the header comes with the first row


def finite_weights(out) -> dict:
    """The checkpoint in ``out``, asserted to load with finite network weights."""
    state = checkpoint.load(out)
    for key, tensor in state["model"].items():
        assert torch.isfinite(tensor).all(), key
    return state


def metric_rows(out: Path) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def untimed(rows: list[dict]) -> list[dict]:
    return [
        {k: v for k, v in row.items() if k not in TIMED and not k.startswith("time/")}
        for row in rows
    ]


def assert_same_run(out: Path, reference: Path):
    """``out`` ended exactly where the uninterrupted ``reference`` did, and logged the same."""
    a, b = checkpoint.load(out), checkpoint.load(reference)
    assert a["global_step"] == b["global_step"] == TOTAL
    for key in b["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in b["env"]:
        assert np.array_equal(a["env"][key], b["env"][key]), key
    for key in ("next_obs", "next_episode_starts", "generator", "torch_rng"):
        assert torch.equal(a[key], b[key]), key
    for index, moments in b["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(a["optimizer"]["state"][index][key], value), (index, key)
    rows, straight = metric_rows(out), metric_rows(reference)
    steps = [int(row["global_step"]) for row in rows]
    assert steps == sorted(set(steps)), "duplicate or out-of-order metrics rows"
    assert list(rows[0]) == list(straight[0])
    assert untimed(rows) == untimed(straight)


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    """A tmpfs mounted on ``folder``; skips the test where mounting is not permitted."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(disk: Path):
    """Take every free byte of the filesystem of ``disk``: one big file, then small ones for
    the last pages."""
    with open(disk / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    for k in range(10_000):
        try:
            (disk / f"filler{k}").write_bytes(b"\0")
        except OSError:
            break
    assert os.statvfs(disk).f_bavail == 0


# ------------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished 1-iteration snake run (`--steps 10`, rounded up), a cartpole run, and an
    uninterrupted TOTAL-step run, made at once; each with the result of its CLI call."""
    root = tmp_path_factory.mktemp("runs")
    cartpole = [
        "--set",
        "game.cartpole.ppo.num_envs=16",
        "--set",
        "game.cartpole.ppo.num_steps=8",
        *sets(),
    ]
    calls = {
        "snake": ["run", "--steps", 10, "--out", root / "snake", *sets()],
        "cartpole": ["run", "--game", "cartpole", "--steps", 128, "--out", root / "cp", *cartpole],
        "straight": ["run", "--steps", TOTAL, "--out", root / "straight", *sets()],
    }
    results = dict(zip(calls, cli_together(*calls.values()), strict=True))
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr)
    return {
        "snake": root / "snake",
        "snake_result": results["snake"],
        "cartpole": root / "cp",
        "straight": root / "straight",
    }


def copy_run(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / "run", symlinks=True))


# ------------------------------------------------------------------------------- 1. signals


@pytest.mark.parametrize(
    "moment", MOMENTS, ids=[f"int{m[signal.SIGINT]}s-term{m[signal.SIGTERM]}s" for m in MOMENTS]
)
def test_a_signal_saves_at_an_iteration_boundary_and_the_resume_is_bit_for_bit(
    moment, runs, tmp_path
):
    """SIGINT and SIGTERM, each a random 0-1.5 s after the first metrics row (two runs at once):
    exit 130 / 143 with a whole-iteration checkpoint; --resume then equals a straight run."""
    procs = {
        signum: (
            tmp_path / signum.name,
            start("run", "--steps", TOTAL, "--out", tmp_path / signum.name, *sets()),
        )
        for signum in moment
    }
    due, sent = {}, set()
    deadline = time.monotonic() + 180
    while len(sent) < len(procs):
        now = time.monotonic()
        for signum, (out, proc) in procs.items():
            if signum in sent:
                continue
            if proc.poll() is not None:
                raise AssertionError(f"{signum.name} run ended before its signal: {finish(proc)}")
            if signum not in due and has_rows(out):
                due[signum] = now + moment[signum]
            if signum in due and now >= due[signum]:
                proc.send_signal(signum)
                sent.add(signum)
        assert now < deadline, "no metrics row within 180 s"
        time.sleep(0.005)

    for signum, (out, proc) in procs.items():
        result = finish(proc)
        assert result.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], result
        assert "Traceback" not in result.stderr and not result.stderr.strip(), result.stderr
        step = checkpoint.load(out)["global_step"]
        assert 0 < step < TOTAL and step % ITERATION == 0, step
        last = result.stdout.strip().splitlines()[-1]
        assert last == f"interrupted ({signum.name}): checkpoint saved at step {step:,} in {out}"
        assert json.loads((out / "summary.json").read_text())["interrupted"] is True
        assert int(metric_rows(out)[-1]["global_step"]) == step

    resumed = cli_together(
        *(["run", "--resume", out, "--steps", TOTAL] for out, _ in procs.values())
    )
    for result, (out, _) in zip(resumed, procs.values(), strict=True):
        assert result.returncode == 0, result.stderr
        assert "done:" in result.stdout
        assert json.loads((out / "summary.json").read_text())["interrupted"] is False
        assert_same_run(out, runs["straight"])


def test_kill_9_mid_save_loses_nothing_and_the_resume_is_bit_for_bit(runs, tmp_path):
    """SIGKILL a random moment after the first checkpoint, during a save where one is caught:
    the checkpoint on disk is whole, and --resume cleans the temp and equals a straight run."""
    out = tmp_path / "run"
    proc = start("run", "--steps", TOTAL, "--out", out, *sets("run.checkpoint_interval=10"))
    wait_for(lambda: (out / checkpoint.FILENAME).exists() or proc.poll() is not None)
    time.sleep(KILL_DELAY)
    deadline = time.monotonic() + 5
    while not temps(out) and time.monotonic() < deadline and proc.poll() is None:
        pass  # kill while a save is in flight: its temp file is then left behind
    proc.kill()
    finish(proc)
    assert proc.returncode == -signal.SIGKILL, "the run ended before kill -9: raise TOTAL"
    step = checkpoint.load(out)["global_step"]  # the old file or the new one, never half
    assert step % (ITERATION * 10) == 0 and 0 < step < TOTAL, step
    if not temps(out):  # the save finished before the kill landed: leave what a kill mid-save does
        half = (out / checkpoint.FILENAME).read_bytes()[:5000]
        (out / f".{checkpoint.FILENAME}.{proc.pid}.tmp").write_bytes(half)

    result = cli("run", "--resume", out, "--steps", TOTAL)
    assert result.returncode == 0, result.stderr
    assert temps(out) == []
    assert_same_run(out, runs["straight"])


# ------------------------------------------------------------------------------- 2. live run


def test_a_live_run_directory_is_refused_naming_its_pid(tmp_path):
    out = tmp_path / "live"
    live = start("run", "--steps", ITERATION * 100_000, "--out", out, *sets())
    try:
        wait_for(lambda: has_rows(out) or live.poll() is not None)
        results = cli_together(
            ["run", "--steps", 256, "--out", out, *sets()],
            ["run", "--resume", out],
            ["run", "--resume", out, "--steps", ITERATION * 200_000],
        )
        for result in results:
            assert one_line(result) == (
                f"Error: run directory {out} is in use by process {live.pid}; "
                "wait for it or choose another --out"
            )
        # the live run went on: it still owns the folder and keeps logging
        assert live.poll() is None
        assert (out / ".lock").read_text() == f"{live.pid}\n"
        rows = len(metric_rows(out))
        wait_for(lambda: len(metric_rows(out)) > rows)
        live.send_signal(signal.SIGTERM)
        result = finish(live)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    assert result.returncode == 143, result.stderr
    assert finite_weights(out)["global_step"] > 0
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True


# ------------------------------------------------------------------------------- 3. full disk

QUIET = {"echo": lambda *_: None}


def tiny(steps: int, **run_settings):
    data = cfg.merge(cfg.parse_set(SETS[:7]), {"run": {"checkpoint_interval": 1, **run_settings}})
    return cfg.from_dict(cfg.merge(data, {"game": {"snake": {"ppo": {"total_timesteps": steps}}}}))


def test_enospc_while_saving_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    """In-process: every write to a checkpoint temp file lands half, then ENOSPC."""
    out = tmp_path / "run"
    run(tiny(2 * ITERATION), out=out, **QUIET)
    before = snapshot(out)
    real_write = os.write

    def write(fd, data):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if not re.fullmatch(r"\.checkpoint\.pt\.\d+\.tmp", name):
            return real_write(fd, data)
        if os.fstat(fd).st_size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(rundir.os, "write", write)
    with pytest.raises(RunError) as info:
        run(tiny(6 * ITERATION), resume=out, **QUIET)
    path = out / checkpoint.FILENAME
    assert str(info.value) == (
        f"no space left on device writing {path}; the previous checkpoint is intact"
    )
    assert (out / checkpoint.FILENAME).read_bytes() == before[checkpoint.FILENAME][0]
    assert temps(out) == []

    # with space again the run goes on from that checkpoint, its rows past it dropped
    monkeypatch.undo()
    run(tiny(6 * ITERATION), resume=out, **QUIET)
    assert checkpoint.load(out)["global_step"] == 6 * ITERATION
    steps = [int(row["global_step"]) for row in metric_rows(out)]
    assert steps == [ITERATION * k for k in range(1, 7)]


def test_a_tmpfs_too_small_for_the_second_checkpoint(tmp_path):
    """A real 192 KiB tmpfs: the first checkpoint (~110 KiB) fits, its replacement does not."""
    with tmpfs(tmp_path / "disk", "size=192k") as disk:
        out = disk / "run"
        result = cli(
            "run", "--steps", ITERATION * 20, "--out", out, *sets("run.checkpoint_interval=1")
        )
        assert one_line(result) == (
            f"Error: no space left on device writing {out / checkpoint.FILENAME}; "
            "the previous checkpoint is intact"
        )
        assert finite_weights(out)["global_step"] == ITERATION
        assert temps(out) == []


def test_a_disk_that_fills_while_metrics_grow_keeps_the_checkpoint(tmp_path):
    """A 1 MiB tmpfs holds a finished run; its resume fills the disk while appending rows."""
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        out = disk / "run"
        assert cli("run", "--steps", 2 * ITERATION, "--out", out, *sets()).returncode == 0
        before = (out / checkpoint.FILENAME).read_bytes()
        size = (out / "metrics.csv").stat().st_size
        # no save before the end: the first write to need a new page is a metrics row
        proc = start(
            "run", "--resume", out, "--steps", TOTAL, *sets("run.checkpoint_interval=1000")
        )
        wait_for(lambda: (out / "metrics.csv").stat().st_size > size or proc.poll() is not None)
        fill(disk)
        result = finish(proc)
        assert (out / checkpoint.FILENAME).read_bytes() == before
        assert temps(out) == []
        assert "no space left" in one_line(result).lower()


# ------------------------------------------------------------------------------- 4. bad checkpoints


def flip_a_payload_byte(data: bytes) -> bytes:
    middle = checkpoint.HEADER + (len(data) - checkpoint.HEADER) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


NOT_THIS_GAME = (
    r"{ckpt} is not this run's: checkpoint is for game 'cartpole', this run is 'snake'",
    r"checkpoint was trained on 'cartpole', not 'snake'",
)
# how to damage a good checkpoint (given a cartpole one), and what resume and play then say
BAD_CHECKPOINTS = {
    "empty": (lambda good, foreign: b"", r"checkpoint {ckpt} is empty"),
    "truncated": (
        lambda good, foreign: good[: len(good) // 2],
        r"checkpoint {ckpt} is corrupt: truncated \(\d+ of \d+ B\)",
    ),
    "flipped byte": (
        lambda good, foreign: flip_a_payload_byte(good),
        r"checkpoint {ckpt} is corrupt: checksum mismatch",
    ),
    "random bytes": (
        lambda good, foreign: random.Random(7).randbytes(len(good)),
        r"checkpoint {ckpt} is corrupt or not a fasttrain checkpoint \(\w+\)",
    ),
    "another game's": (lambda good, foreign: foreign, NOT_THIS_GAME),
}


@pytest.fixture(scope="module")
def bad_checkpoints(runs, tmp_path_factory):
    """Each kind of damage in a copy of a finished run, refused by `run --resume` and `play`
    (every call made here, a few at a time): {kind: (folder, files before, results)}."""
    folders, calls = {}, {}
    for kind, (damage, _) in BAD_CHECKPOINTS.items():
        out = copy_run(runs["snake"], tmp_path_factory.mktemp("bad"))
        good = (out / checkpoint.FILENAME).read_bytes()
        foreign = (runs["cartpole"] / checkpoint.FILENAME).read_bytes()
        (out / checkpoint.FILENAME).write_bytes(damage(good, foreign))
        folders[kind] = (out, snapshot(out))
        calls[kind, "run"] = (["run", "--resume", out, "--steps", 4 * ITERATION], None)
        calls[kind, "play"] = (["play", "--checkpoint", out, "--steps", 3], None)
    results = cli_pool(calls)
    return {kind: (*folders[kind], results[kind, "run"], results[kind, "play"]) for kind in folders}


@pytest.mark.parametrize("kind", BAD_CHECKPOINTS)
def test_a_bad_checkpoint_is_refused_by_resume_and_play_and_left_alone(kind, bad_checkpoints):
    out, before, resumed, played = bad_checkpoints[kind]
    messages = BAD_CHECKPOINTS[kind][1]
    messages = (messages, messages) if isinstance(messages, str) else messages
    for result, message in zip((resumed, played), messages, strict=True):
        path = re.escape(str(out / checkpoint.FILENAME))
        assert re.fullmatch("Error: " + message.format(ckpt=path), one_line(result))
        assert result.stdout == ""
    assert snapshot(out) == before


# ------------------------------------------------------------------------------- 5, 6. bad input

# Each is refused before any work: one line, no file anywhere (the command runs in an empty
# folder, so a default runs/ folder would show too).
BAD_INPUTS = {
    # 5. NaN and inf through game params and learner settings
    "reward_fruit=nan": (
        ["--set", "game.snake.reward_fruit=nan"],
        1,
        "snake.reward_fruit must be finite, got nan",
    ),
    "reward_fruit=inf": (
        ["--set", "game.snake.reward_fruit=inf"],
        1,
        "snake.reward_fruit must be finite, got inf",
    ),
    "cartpole gravity=nan": (
        ["--game", "cartpole", "--set", "game.cartpole.gravity=nan"],
        1,
        "cartpole.gravity must be finite, got nan",
    ),
    "learning_rate=inf": (
        ["--set", "ppo.learning_rate=inf"],
        1,
        "ppo.learning_rate must be a finite number, got inf",
    ),
    "learning_rate=nan": (
        ["--set", "ppo.learning_rate=nan"],
        1,
        "ppo.learning_rate must be a finite number, got nan",
    ),
    "clip_coef=nan": (
        ["--set", "ppo.clip_coef=nan"],
        1,
        "ppo.clip_coef must be a finite number, got nan",
    ),
    # 6. inputs that used to end in a traceback
    "seed 2**64": (
        ["--seed", str(2**64)],
        2,
        "Invalid value for '--seed': 18446744073709551616 is not in the range",
    ),
    "cnn on cartpole": (
        ["--game", "cartpole", "--set", "model.kind=cnn"],
        1,
        "model.kind = 'cnn' needs (C, H, W) observations",
    ),
    "binary config": (
        ["--config", "binary.toml"],
        1,
        "config file binary.toml is not a text (UTF-8 TOML) file",
    ),
    "out under a file": (
        ["--out", "file/run"],
        1,
        "cannot create run directory file/run: {tmp}/file is a file",
    ),
    "num-envs 1e12": (["--num-envs", "1000000000000"], 1, "1,000,000,000,000 snake envs need"),
    "num_steps 1e8": (
        ["--set", "ppo.num_steps=100000000"],
        1,
        "PPO rollout storage needs 113,296.5 GiB",
    ),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every BAD_INPUTS call, each in its own folder, a few at a time:
    {name: (folder, files before, result)}."""
    folders, calls = {}, {}
    for name, (args, _, _) in BAD_INPUTS.items():
        folder = tmp_path_factory.mktemp("input")
        (folder / "binary.toml").write_bytes(bytes(range(256)))
        (folder / "file").write_text("a file, not a folder\n")
        folders[name] = (folder, snapshot(folder))
        out = [] if "--out" in args else ["--out", "run"]
        calls[name] = (["run", "--steps", 256, *out, *args], folder)
    results = cli_pool(calls)
    return {name: (*folders[name], results[name]) for name in BAD_INPUTS}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_refused_in_one_line_before_any_work(name, refusals):
    folder, before, result = refusals[name]
    _, code, words = BAD_INPUTS[name]
    line = one_line(result, code)
    assert line.startswith("Error: ") and words.format(tmp=folder) in line, line
    assert result.stdout == ""
    assert snapshot(folder) == before


def test_a_model_too_big_for_memory_is_refused_in_one_line(tmp_path):
    result = cli(
        "run", "--steps", 256, "--out", "run", "--set", "model.hidden=1000000000", cwd=tmp_path
    )
    assert snapshot(tmp_path) == {}
    one_line(result)


def test_resuming_with_another_model_size_is_refused_and_changes_nothing(runs, tmp_path):
    out = copy_run(runs["snake"], tmp_path)
    before = snapshot(out)
    result = cli("run", "--resume", out, "--steps", 4 * ITERATION, "--set", "model.hidden=64")
    assert one_line(result) == "Error: checkpoint model.hidden = 32, this run has 64"
    assert snapshot(out) == before


def test_out_in_a_read_only_folder_is_refused(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as disk:
        result = cli("run", "--steps", 256, "--out", disk / "run", *sets())
        assert one_line(result) == (
            f"Error: run directory {disk / 'run'} is not writable ({disk}: read-only file system)"
        )
        assert snapshot(disk) == {}


def test_ctrl_c_during_start_up_exits_130_in_one_line(tmp_path):
    for delay in (0.3, 0.6, 1.0):
        out = tmp_path / f"run{delay}"
        proc = start("run", "--steps", TOTAL, "--out", out, *sets())
        time.sleep(delay)
        assert not out.exists(), "start-up ended before the signal"
        proc.send_signal(signal.SIGINT)
        result = finish(proc)
        assert not (out / checkpoint.FILENAME).exists()
        if "Traceback" in result.stderr or result.returncode != 130:
            raise UserErrorBug(f"{delay} s: exit {result.returncode}:\n{result.stderr[-1500:]}")
        assert len(result.stderr.strip().splitlines()) <= 1, result.stderr


# ------------------------------------------------------------------------------- 5. NaN at run time

RUNTIME_NAN = {
    # a fruit worth 1e38 overflows the returns in the first iteration: no checkpoint yet
    "reward_fruit=1e38": ["game.snake.reward_fruit=1e38"],
}


@pytest.mark.parametrize("name", RUNTIME_NAN)
def test_updates_that_keep_going_non_finite_stop_the_run_in_one_line(name, tmp_path):
    out = tmp_path / "run"
    settings = ["run.nan_patience=2", "run.checkpoint_interval=1", *RUNTIME_NAN[name]]
    result = cli("run", "--steps", ITERATION * 100, "--out", out, *sets(*settings))
    line = one_line(result)
    match = re.fullmatch(
        r"Error: stopped at step ([\d,]+): (\d+) updates in a row were skipped for a "
        r"non-finite \S.* \(check rewards and settings\); (.+)",
        line,
    )
    assert match, line
    assert int(match[2]) >= 2
    saved = (out / checkpoint.FILENAME).exists()
    # the message says what is on disk
    assert match[3] == (
        f"the last good checkpoint in {out} is kept" if saved else "no checkpoint was written"
    )
    if saved:
        assert finite_weights(out)["global_step"] < int(match[1].replace(",", ""))
    assert temps(out) == []


def test_a_learning_rate_that_overflows_the_optimizer_stops_in_one_line(tmp_path):
    out = tmp_path / "run"
    result = cli("run", "--steps", ITERATION * 10, "--out", out, *sets("ppo.learning_rate=1e38"))
    assert not (out / checkpoint.FILENAME).exists()
    one_line(result)


# ------------------------------------------------------------------------------- 7. rounding


def test_steps_are_rounded_to_whole_iterations_and_a_finished_run_is_left_alone(runs, tmp_path):
    first = runs["snake_result"].stdout.splitlines()[0]
    rounded = "128 steps (total_timesteps 10 rounded to 1 iterations of 128)"
    assert f" | {rounded} | run dir {runs['snake']}" in first, first
    out = copy_run(runs["snake"], tmp_path)
    before = snapshot(out, mtimes=True)
    result = cli("run", "--resume", out)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == (
        f"{out} is complete: 128 steps of total_timesteps 10; nothing to do "
        "(pass --steps with a larger total to continue)\n"
    )
    after = snapshot(out, mtimes=True)
    # the lock file is written and emptied again by the resume: same bytes, a new mtime
    assert after.pop(".lock")[0] == before.pop(".lock")[0] == b""
    assert after == before

"""Fault injection on `fasttrain run` and `fasttrain play`: signals at random moments, kill -9,
a live run directory, full disks, corrupt or foreign checkpoints, NaN and inf, Ctrl-C during
start-up, and bad input.

Each case asserts the exit code, one error line and no traceback, and that no work is lost:
the previous checkpoint keeps its bytes (or loads with finite weights), and a resumed run equals
an uninterrupted one bit for bit. Runs have tiny settings and one thread each. What a signal,
a kill or start-up is sent to runs as a CLI subprocess, several at once where they are
independent (module fixtures make them, tests check them); what the command says and leaves on
disk runs in this process through click's runner (``cli_in_process``), as does a fault that needs
a monkeypatch.
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
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.errors import RunError
from fasttrain.run import checkpoint, rundir
from fasttrain.run.runner import run
from tests.cli import (
    UserErrorBug,
    cli_in_process,
    finish,
    header,
    one_line,
    snapshot,
    start,
    start_cli,
)
from tests.conftest import tmpfs

SETS = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.ppo.num_envs=16",
    "game.snake.ppo.num_steps=8",
    "game.snake.ppo.num_minibatches=2",
    "model.hidden=32",
    "log.progress=false",
    "log.curves=false",  # these runs check files and signals; a picture costs ~0.5 s each
    "run.torch_threads=1",  # runs share the two cores without oversubscribing them
    "run.numba_threads=1",
    # eager iterations of a known length: run.compile = auto would compile the runs of 2M+ steps
    # that stand for "until stopped" here (a compile first, then much shorter iterations)
    "run.compile=off",
    # a constant rate: a stopped run resumes to a shorter total than it started with (the end
    # of every schedule would move with it) and still equals a straight run of that total
    "game.snake.ppo.anneal_lr=false",
]
ITERATION = 16 * 8  # environment steps per PPO iteration with SETS
# long enough that a signal sent within 1.5 s of the first metrics row lands mid-run
TOTAL = ITERATION * 200
RNG = random.Random(20240612)
# two random moments per signal, each 0-1.5 s after the run's first metrics row (a third
# per signal was two more processes started on the one core a test worker has: ~8 s)
SIGNALLED = {
    f"{signum.name}-{k}": (signum, round(RNG.uniform(0, 1.5), 2))
    for k in range(2)
    for signum in (signal.SIGINT, signal.SIGTERM)
}
# Windows has no SIGKILL (the tests that send it are marked posix)
KILLED = {"SIGKILL": (getattr(signal, "SIGKILL", 9), round(RNG.uniform(0, 1.5), 2))}
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
TIMED = ("time_s", "sps")  # metrics.csv columns that depend on the clock, with time/*


def sets(*extra: str) -> list[str]:
    return [arg for item in (*SETS, *extra) for arg in ("--set", item)]


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


def metric_steps(out: Path) -> list[int]:
    return [int(row["global_step"]) for row in metric_rows(out)]


def untimed(rows: list[dict]) -> list[dict]:
    return [
        {k: v for k, v in row.items() if k not in TIMED and not k.startswith("time/")}
        for row in rows
    ]


def assert_same_run(out: Path, reference: Path, total: int = TOTAL):
    """``out`` ended exactly where the uninterrupted ``reference`` did, at ``total`` steps, and
    logged the same."""
    a, b = checkpoint.load(out), checkpoint.load(reference)
    assert a["global_step"] == b["global_step"] == total
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
    """A finished 1-iteration snake run (`--steps 10`, rounded up) and a cartpole run, made at
    once; the snake run's CLI result too."""
    root = tmp_path_factory.mktemp("runs")
    cartpole = ["game.cartpole.ppo.num_envs=16", "game.cartpole.ppo.num_steps=8"]
    results = {
        "snake": cli_in_process("run", "--steps", 10, "--out", root / "snake", *sets()),
        "cartpole": cli_in_process(
            "run", "--game", "cartpole", "--steps", 128, "--out", root / "cp", *sets(*cartpole)
        ),
    }
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr)
    return {"snake": root / "snake", "snake_result": results["snake"], "cartpole": root / "cp"}


def attempt(read, folder: Path):
    """``read(folder)``, or the text of the error it raised."""
    try:
        return read(folder)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def copy_run(source: Path, folder: Path) -> Path:
    return Path(shutil.copytree(source, folder / "run", symlinks=True))


# ------------------------------------------------------------------------------- 1. signals


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Every SIGNALLED and KILLED run of TOTAL steps, stopped at its moment, all at once
    (subprocesses); then an uninterrupted run to END, a few iterations past the latest stop,
    and each stopped run resumed with `--resume DIR --steps END` (both in this process: no
    signal reaches them, and a process start costs more than either run; END, not TOTAL:
    the ~170 iterations each past it were most of this file's time and checked nothing more).

    Returns {"straight": folder, "end": END, case: {"out", "stopped" (its result), "step" (of
    its checkpoint after the stop), "temps" and "last_row" (of metrics.csv) after the stop,
    "summary" (summary.json, or None), "resumed" (the resume's result)}}; a value that could
    not be read is the error's text, for the test to report.
    """
    root = tmp_path_factory.mktemp("signals")
    cases = {**SIGNALLED, **KILLED}
    procs = {}
    for case, (signum, _) in cases.items():
        # kill -9 in the middle of the second save: the writer holds it between its finished
        # temp file and the rename (a test-only pause), where the kill always lands
        extra, env = [], None
        if signum == signal.SIGKILL:
            extra = ["run.checkpoint_interval=10"]
            env = {rundir.PAUSE_BEFORE_RENAME: f"{checkpoint.FILENAME}:2"}
        args = ["run", "--steps", TOTAL, "--out", root / case, *sets(*extra)]
        procs[case] = start_cli(*args, env=env)
    due, sent = {}, set()
    deadline = time.monotonic() + 300
    while len(sent) < len(cases):
        for case, (signum, delay) in cases.items():
            out, proc, now = root / case, procs[case], time.monotonic()
            if case in sent:
                continue
            if proc.poll() is not None:
                raise AssertionError(f"{case} ended before its signal: {finish(proc)}")
            ready = (
                (out / checkpoint.FILENAME).exists() if signum == signal.SIGKILL else has_rows(out)
            )
            if signum == signal.SIGKILL:  # the paused second save: its temp file is there
                ready = ready and bool(temps(out))
            if case not in due and ready:
                due[case] = now + (0 if signum == signal.SIGKILL else delay)
            if case not in due or now < due[case]:
                continue
            proc.send_signal(signum)
            sent.add(case)
        assert time.monotonic() < deadline, f"not signalled in time: {set(cases) - sent}"
        time.sleep(0.002)

    results = {name: finish(proc) for name, proc in procs.items()}
    summary = {"straight": root / "straight"}
    for case in cases:
        out = root / case
        summary[case] = {
            "out": out,
            "stopped": results[case],
            "step": attempt(lambda o: checkpoint.load(o)["global_step"], out),
            "temps": temps(out),
            "last_row": attempt(lambda o: metric_steps(o)[-1], out),
            "summary": attempt(lambda o: json.loads((o / "summary.json").read_text()), out),
            "pid": procs[case].pid,
        }
    steps = [got["step"] for got in summary.values() if isinstance(got, dict)]
    steps += [got["last_row"] for got in summary.values() if isinstance(got, dict)]
    end = summary["end"] = max([s for s in steps if isinstance(s, int)], default=0) + 4 * ITERATION
    straight = cli_in_process("run", "--steps", end, "--out", root / "straight", *sets())
    assert straight.returncode == 0, straight.stderr
    resumed = {
        case: cli_in_process("run", "--resume", root / case, "--steps", end) for case in cases
    }
    for case in cases:
        summary[case]["resumed"] = resumed[case]
    return summary


@pytest.mark.parametrize("case", SIGNALLED, ids=[f"{k}-{v[1]}s" for k, v in SIGNALLED.items()])
@pytest.mark.posix
def test_a_signal_saves_at_an_iteration_boundary_and_exits_128_plus_its_number(case, stopped):
    signum, _ = SIGNALLED[case]
    got = stopped[case]
    result, step, out = got["stopped"], got["step"], got["out"]
    assert result.returncode == EXIT_CODES[signum], result
    assert "Traceback" not in result.stderr and not result.stderr.strip(), result.stderr
    assert isinstance(step, int) and 0 < step < TOTAL and step % ITERATION == 0, step
    last = result.stdout.strip().splitlines()[-1]
    assert last == f"interrupted ({signum.name}): checkpoint saved at step {step:,} in {out}"
    assert isinstance(got["summary"], dict), got["summary"]
    assert got["summary"]["interrupted"] is True and got["summary"]["global_step"] == step
    assert got["last_row"] == step  # no row past the checkpoint
    assert got["temps"] == []


@pytest.mark.posix
def test_kill_9_leaves_a_whole_checkpoint(stopped):
    got = stopped["SIGKILL"]
    assert got["stopped"].returncode == -signal.SIGKILL
    assert isinstance(got["step"], int), got["step"]  # the old file or the new, never half
    assert got["step"] == ITERATION * 10, got["step"]  # the first save; the second was cut
    assert got["temps"] == [f".{checkpoint.FILENAME}.{got['pid']}.tmp"]  # left mid-save
    assert got["last_row"] >= got["step"]  # rows past the checkpoint, for the resume to drop


@pytest.mark.posix
@pytest.mark.parametrize("case", [*SIGNALLED, *KILLED])
def test_the_resume_of_a_stopped_run_equals_a_straight_run_bit_for_bit(case, stopped):
    got = stopped[case]
    result = got["resumed"]
    assert result.returncode == 0, result.stderr
    assert "done:" in result.stdout and "Traceback" not in result.stderr
    assert temps(got["out"]) == []  # kill -9's temp file is gone too
    assert json.loads((got["out"] / "summary.json").read_text())["interrupted"] is False
    assert_same_run(got["out"], stopped["straight"], stopped["end"])


@pytest.fixture(scope="module")
def stopped_twice(tmp_path_factory):
    """A run with ~1 s iterations and a checkpoint after each, sent its signal twice 50 ms
    apart just after a save (both land inside the next iteration), once per signal, the two
    at once: {signal: (folder, checkpoint bytes before, result)}. 16 envs x 8192 steps took
    0.85 s per iteration alone on a 2-core AMD EPYC; 512 steps took 55 ms there, so the second
    signal could come after the next save."""
    root = tmp_path_factory.mktemp("twice")
    slow = sets("game.snake.ppo.num_steps=8192", "run.checkpoint_interval=1")
    procs = {
        s: start_cli("run", "--steps", 8192 * 1000, "--out", root / s.name, *slow)
        for s in EXIT_CODES
    }
    saved, before = {}, {}
    deadline = time.monotonic() + 300
    while len(before) < len(procs):
        for signum, proc in procs.items():
            path = root / signum.name / checkpoint.FILENAME
            if signum in before or not path.exists():
                continue
            assert proc.poll() is None, finish(proc)
            mtime = path.stat().st_mtime_ns
            if saved.setdefault(signum, mtime) != mtime:  # a save just ended: send both now
                before[signum] = path.read_bytes()
                proc.send_signal(signum)
                time.sleep(0.05)
                proc.send_signal(signum)
        assert time.monotonic() < deadline, "no second checkpoint in time"
        time.sleep(0.002)
    return {s: (root / s.name, before[s], finish(proc)) for s, proc in procs.items()}


@pytest.mark.parametrize(
    "signum",
    [
        signal.SIGINT,
        signal.SIGTERM,
    ],
    ids=["SIGINT", "SIGTERM"],
)
@pytest.mark.posix
def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(signum, stopped_twice):
    out, before, result = stopped_twice[signum]
    assert "Traceback" not in result.stderr and not result.stderr.strip(), result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        f"stopped at once: the last checkpoint in {out} is kept as it was"
    )
    assert (out / checkpoint.FILENAME).read_bytes() == before
    assert temps(out) == []
    if result.returncode != EXIT_CODES[signum]:
        raise UserErrorBug(f"exit {result.returncode}, not {EXIT_CODES[signum]}")


# ------------------------------------------------------------------------------- 2. live run


@pytest.mark.posix
def test_a_live_run_directory_is_refused_naming_its_pid(tmp_path):
    out = tmp_path / "live"
    live = start_cli("run", "--steps", ITERATION * 100_000, "--out", out, *sets())
    try:
        wait_for(lambda: has_rows(out) or live.poll() is not None)
        results = {
            "--out": cli_in_process("run", "--steps", 256, "--out", out, *sets()),
            "--resume --steps": cli_in_process(
                "run", "--resume", out, "--steps", ITERATION * 200_000
            ),
        }
        for result in results.values():
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


@pytest.mark.linux
def test_enospc_while_saving_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    """In-process: each write to a checkpoint temp file lands half, then ENOSPC."""
    out = tmp_path / "run"
    run(tiny(2 * ITERATION), out=out, **QUIET)
    before = (out / checkpoint.FILENAME).read_bytes()
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
    assert str(info.value) == (
        f"no space left on device writing {out / checkpoint.FILENAME}; "
        "the previous checkpoint is intact"
    )
    assert (out / checkpoint.FILENAME).read_bytes() == before
    assert temps(out) == []

    # with space again the run goes on from that checkpoint, its rows past it dropped
    monkeypatch.undo()
    run(tiny(6 * ITERATION), resume=out, **QUIET)
    assert checkpoint.load(out)["global_step"] == 6 * ITERATION
    assert metric_steps(out) == [ITERATION * k for k in range(1, 7)]


def test_a_metrics_row_cut_short_by_a_full_disk_is_dropped_on_resume(tmp_path):
    """In-process: a full disk stopped the run after writing the first bytes of row 384."""
    out = tmp_path / "run"
    run(tiny(2 * ITERATION), out=out, **QUIET)
    with open(out / "metrics.csv", "a") as f:
        f.write("38")
    run(tiny(4 * ITERATION), resume=out, **QUIET)
    assert metric_steps(out) == [ITERATION * k for k in range(1, 5)]


def test_a_tmpfs_too_small_for_the_second_checkpoint(tmp_path):
    """A real 192 KiB tmpfs: the first checkpoint (~110 KiB) fits, its replacement does not."""
    with tmpfs(tmp_path / "disk", "size=192k") as disk:
        out = disk / "run"
        result = cli_in_process(
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
        assert (
            cli_in_process("run", "--steps", 2 * ITERATION, "--out", out, *sets()).returncode == 0
        )
        before = (out / checkpoint.FILENAME).read_bytes()
        size = (out / "metrics.csv").stat().st_size
        # no save before the end: the first write to need a new page is a metrics row
        proc = start_cli(
            "run", "--resume", out, "--steps", TOTAL, *sets("run.checkpoint_interval=1000")
        )
        wait_for(lambda: (out / "metrics.csv").stat().st_size > size or proc.poll() is not None)
        fill(disk)
        result = finish(proc)
        assert (out / checkpoint.FILENAME).read_bytes() == before
        assert temps(out) == []
        assert one_line(result) == (
            f"Error: no space left on device writing {out / 'metrics.csv'}; "
            f"the last checkpoint in {out} is intact"
        )


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
        r"checkpoint {ckpt} is not a fasttrain checkpoint",
    ),
    "another game's": (lambda good, foreign: foreign, NOT_THIS_GAME),
}


@pytest.fixture(scope="module")
def bad_checkpoints(runs, tmp_path_factory):
    """Each kind of damage in a copy of a finished run, refused by `run --resume` and `play`
    (every call made here): {kind: (folder, files before, results)}."""
    folders, calls = {}, {}
    for kind, (damage, _) in BAD_CHECKPOINTS.items():
        out = copy_run(runs["snake"], tmp_path_factory.mktemp("bad"))
        good = (out / checkpoint.FILENAME).read_bytes()
        foreign = (runs["cartpole"] / checkpoint.FILENAME).read_bytes()
        (out / checkpoint.FILENAME).write_bytes(damage(good, foreign))
        folders[kind] = (out, snapshot(out))
        calls[kind, "run"] = ["run", "--resume", out, "--steps", 4 * ITERATION]
        calls[kind, "play"] = ["play", "--checkpoint", out, "--steps", 3]
    results = {key: cli_in_process(*args) for key, args in calls.items()}
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
        "[game.snake]: snake.reward_fruit must be finite, got nan",
    ),
    "reward_fruit=inf": (
        ["--set", "game.snake.reward_fruit=inf"],
        1,
        "[game.snake]: snake.reward_fruit must be finite, got inf",
    ),
    "cartpole gravity=nan": (
        ["--game", "cartpole", "--set", "game.cartpole.gravity=nan"],
        1,
        "[game.cartpole]: cartpole.gravity must be finite, got nan",
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
    "clip_coef=nan": (["--set", "ppo.clip_coef=nan"], 1, "ppo.clip_coef must be a finite number"),
    # finite, but Adam's first step lr / (1 - beta1) overflows float32
    "learning_rate=1e38": (
        ["--set", "ppo.learning_rate=1e38"],
        1,
        "ppo.learning_rate must be in (0, 10], got 1e+38",
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
        "model.kind = 'cnn' needs (C, H, W) observations; cartpole's are (4,)",
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
    "num-envs 1e12": (
        ["--num-envs", "1000000000000"],
        1,
        "ppo.num_envs must be in [1, 16_777_216], got 1000000000000",
    ),
    "num_steps 65536": (
        ["--set", "ppo.num_steps=65536", "--set", "ppo.num_envs=1024"],
        1,
        # learners.rollout.nbytes, T = 65,536 steps of N = 1024 rows (snake 12x12: 576 B
        # boards): obs and final_obs (2T + 1) * N * 576 B, actions T * N * 8 B, six float32
        # buffers (rewards, values, final_values, returns, logprobs, advantages) T * N * 24 B,
        # the two flags T * N * 2 B, episode_starts (T + 1) * N B, last_values N * 4 B:
        # 79,658,816,512 B = 74.2 GiB
        "PPO rollout storage needs 74.2 GiB",
    ),
    "num_steps 1e8": (
        ["--set", "ppo.num_steps=100000000"],
        1,
        "ppo.num_steps must be in [1, 65536], got 100000000",  # a loop's length: bounded
    ),
    "hidden 1e9": (
        ["--set", "model.hidden=1000000000"],
        1,
        "training the model (model.hidden = 1000000000) needs",
    ),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every BAD_INPUTS call, each in its own folder: {name: (folder, files before, result)}."""
    folders, calls = {}, {}
    for name, (args, _, _) in BAD_INPUTS.items():
        folder = tmp_path_factory.mktemp("input")
        (folder / "binary.toml").write_bytes(bytes(range(256)))
        (folder / "file").write_text("a file, not a folder\n")
        folders[name] = (folder, snapshot(folder))
        out = [] if "--out" in args else ["--out", "run"]
        calls[name] = (["run", "--steps", 256, *out, *args], folder)
    results = {name: cli_in_process(*args, cwd=cwd) for name, (args, cwd) in calls.items()}
    return {name: (*folders[name], results[name]) for name in BAD_INPUTS}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_refused_in_one_line_before_any_work(name, refusals):
    folder, before, result = refusals[name]
    _, code, words = BAD_INPUTS[name]
    line = one_line(result, code)
    assert line.startswith("Error: ") and words.format(tmp=folder) in line, line
    assert result.stdout == ""
    assert snapshot(folder) == before


def test_resuming_with_another_model_size_is_refused_and_changes_nothing(runs, tmp_path):
    out = copy_run(runs["snake"], tmp_path)
    before = snapshot(out)
    result = cli_in_process(
        "run", "--resume", out, "--steps", 4 * ITERATION, "--set", "model.hidden=64"
    )
    assert one_line(result) == "Error: checkpoint model.hidden = 32, this run has 64"
    assert snapshot(out) == before


def test_out_in_a_read_only_folder_is_refused(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as disk:
        result = cli_in_process("run", "--steps", 256, "--out", disk / "run", *sets())
        assert one_line(result) == (
            f"Error: run directory {disk / 'run'} is not writable ({disk}: read-only file system)"
        )
        assert snapshot(disk) == {}


# ------------------------------------------------------------------------------- Ctrl-C at start-up


def assert_stopped_at_start_up(result, out: Path, signum=signal.SIGINT):
    """Exit 128 + the signal's number (or death by the signal, which a shell reports the same
    way), one line, no work."""
    if "Traceback" in result.stderr:
        raise UserErrorBug(f"traceback (exit {result.returncode}):\n{result.stderr[-1500:]}")
    if result.returncode not in (EXIT_CODES[signum], -signum):
        raise UserErrorBug(f"exit {result.returncode}, not {EXIT_CODES[signum]}:\n{result.stderr}")
    assert result.stderr.strip() == "interrupted", result.stderr
    assert not (out / checkpoint.FILENAME).exists()


START_UP_MOMENTS = [
    (signum, round(RNG.uniform(0.3, 1.0), 2))
    for signum in (signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGTERM)
]


@pytest.mark.posix
def test_ctrl_c_during_start_up_exits_130_in_one_line(tmp_path):
    """Real SIGINTs (and a SIGTERM) at random moments 0.3-1 s after the start, before
    metrics.csv exists."""
    for signum, delay in START_UP_MOMENTS:
        out = tmp_path / f"{signum.name}-{delay}"
        proc = start_cli("run", "--steps", 1280, "--out", out, *sets())
        time.sleep(delay)
        assert not has_rows(out), "start-up ended before the signal"
        proc.send_signal(signum)
        assert_stopped_at_start_up(finish(proc), out, signum)


# A Ctrl-C the moment the command imports fasttrain.bench (the `fasttrain` console script and
# `python -m fasttrain` run fasttrain.__main__, `python -m fasttrain.cli` the module itself),
# made certain: a meta-path hook sends this process a real SIGINT there, which whatever handler
# is installed at that moment receives (Python's own raises KeyboardInterrupt inside the import)
INTERRUPT_AT = """
import runpy, signal, sys
class CtrlC:
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == "fasttrain.bench" and not CtrlC.fired:
            CtrlC.fired = True
            print("Ctrl-C at", name, flush=True)
            signal.raise_signal(signal.SIGINT)
sys.meta_path.insert(0, CtrlC())
sys.argv[0] = "fasttrain"
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["fasttrain", "fasttrain.cli"])
def test_ctrl_c_while_the_cli_module_imports_exits_130_in_one_line(module, tmp_path):
    out = tmp_path / "run"
    args = ["run", "--steps", 128, "--out", out, *sets()]
    result = finish(start("-c", INTERRUPT_AT, module, *args))
    assert result.stdout.startswith("Ctrl-C at fasttrain.bench\n"), result.stdout[:300]
    assert_stopped_at_start_up(result, out)


# ------------------------------------------------------------------------------- 5. NaN at run time


@pytest.fixture(scope="module")
def non_finite(runs, tmp_path_factory):
    """Two runs whose updates keep going non-finite, made at once: a fresh one whose fruit is
    worth 1e38 (returns overflow in its first iteration), and a finished run resumed with
    ppo.vf_coef = 1e38 (each gradient norm overflows). {name: (folder, checkpoint bytes before,
    result)}."""
    fresh = tmp_path_factory.mktemp("nan") / "run"
    resumed = copy_run(runs["snake"], tmp_path_factory.mktemp("nan"))
    before = (resumed / checkpoint.FILENAME).read_bytes()
    patience = ["run.nan_patience=2", "run.checkpoint_interval=1"]
    results = {
        "reward_fruit=1e38": cli_in_process(
            "run",
            "--steps",
            ITERATION * 100,
            "--out",
            fresh,
            *sets(*patience, "game.snake.reward_fruit=1e38"),
        ),
        "vf_coef=1e38": cli_in_process(
            "run",
            "--resume",
            resumed,
            "--steps",
            ITERATION * 100,
            *sets(*patience, "ppo.vf_coef=1e38"),
        ),
    }
    return {
        "reward_fruit=1e38": (fresh, None, results["reward_fruit=1e38"]),
        "vf_coef=1e38": (resumed, before, results["vf_coef=1e38"]),
    }


@pytest.mark.parametrize("name", ["reward_fruit=1e38", "vf_coef=1e38"])
def test_updates_that_keep_going_non_finite_stop_the_run_in_one_line(name, non_finite):
    out, before, result = non_finite[name]
    match = re.fullmatch(
        r"Error: stopped at step ([\d,]+): (\d+) updates in a row were skipped for a "
        r"non-finite \S.* \(check rewards and settings\); (.+)",
        one_line(result),
    )
    assert match, result.stderr
    assert int(match[2]) >= 2
    saved = (out / checkpoint.FILENAME).exists()
    assert saved == (before is not None)  # only the resumed run had a checkpoint
    # the message says what is on disk
    assert match[3] == (
        f"the last good checkpoint in {out} is kept" if saved else "no checkpoint was written"
    )
    if saved:
        assert (out / checkpoint.FILENAME).read_bytes() == before
        assert finite_weights(out)["global_step"] < int(match[1].replace(",", ""))
    assert temps(out) == []


# ------------------------------------------------------------------------------- 7. rounding


def test_steps_are_rounded_to_whole_iterations_and_a_finished_run_is_left_alone(runs, tmp_path):
    first = header(runs["snake_result"].stdout)
    rounded = "128 steps (total_timesteps 10 rounded to 1 iterations of 128)"
    assert f" | {rounded} | run dir {runs['snake']}" in first, first
    out = copy_run(runs["snake"], tmp_path)
    before = snapshot(out, mtimes=True)
    result = cli_in_process("run", "--resume", out)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == (
        f"{out} is complete: 128 steps of total_timesteps 10; nothing to do "
        "(pass --steps with a larger total to continue)\n"
    )
    after = snapshot(out, mtimes=True)
    # the lock file is written and emptied again by the resume: same bytes, a new mtime
    assert after.pop(".lock")[0] == before.pop(".lock")[0] == b""
    assert after == before

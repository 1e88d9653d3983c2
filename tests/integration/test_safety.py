"""A checkpoint from anyone is safe to open, every file is written safely, and what a hostile or
careless user can type ends in one line.

Every command that reads a checkpoint (``run --resume``, ``eval``, ``play`` with a folder or a
file, ``checkpoint inspect``) must refuse a hostile one (``tests/fasttrain/run/test_checkpoint.py``
builds them and gives them to every reader of the API) in one line with the marker never made.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain.cli import main
from fasttrain.errors import ConfigError, RunError
from fasttrain.run import checkpoint
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.rundir import RunLock, open_text, temp_path, write_atomic
from tests.cli import ROOT, cli_in_process, one_line, start_cli
from tests.fasttrain.run.test_checkpoint import HOSTILE, TINY


def sets(*extra: str) -> list[str]:
    return [arg for item in (*TINY, *extra) for arg in ("--set", item)]


def invoke(*args) -> tuple[int, str]:
    """``fasttrain ARGS`` in this process: its exit code and its one error line (a traceback,
    or more than one line, fails the test)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback: {result.exception!r}") from result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Usage:", "Try '"))]
    assert len(lines) <= 1, result.stderr
    return result.exit_code, lines[0] if lines else ""


# ------------------------------------------------------------------------------- hostile files


REFUSED = re.compile(
    r"Error: checkpoint \S+checkpoint\.pt (is a pickle \(torch\.save, or fasttrain's development "
    r"formats 1 and 2\)|holds a pickle \(fasttrain's development format 2\)); fasttrain reads "
    r"only its own format 3 and never unpickles a file"
)


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    """A run directory per hostile file, each given to every command that reads checkpoints
    (in this process, as the command line runs it): {(kind, command): (marker, result)}."""
    calls, markers = {}, {}
    for kind, make in HOSTILE.items():
        root = tmp_path_factory.mktemp("hostile")
        marker = root / "marker"
        run_dir = root / "run"
        run_dir.mkdir()
        (run_dir / checkpoint.FILENAME).write_bytes(make(marker))
        markers[kind] = marker
        file = run_dir / checkpoint.FILENAME
        commands = {
            "run --resume": ["run", "--resume", run_dir, "--steps", 256],
            "eval --run": ["eval", "--run", run_dir, "--episodes", 1],
            "play --checkpoint DIR": ["play", "--checkpoint", run_dir, "--steps", 1],
            "play --checkpoint FILE": ["play", "--checkpoint", file, "--steps", 1],
            "checkpoint inspect": ["checkpoint", "inspect", run_dir],
        }
        if kind != "format 2 header":  # every command once; the other files through two
            commands = {k: commands[k] for k in ("run --resume", "play --checkpoint FILE")}
        for command, args in commands.items():
            calls[kind, command] = args
    results = {key: cli_in_process(*args) for key, args in calls.items()}
    return {key: (markers[key[0]], result) for key, result in results.items()}


def test_every_command_refuses_a_hostile_checkpoint_in_one_line_and_runs_nothing(hostile_runs):
    assert len(hostile_runs) == 9
    for (kind, command), (marker, result) in hostile_runs.items():
        assert REFUSED.fullmatch(one_line(result)), (kind, command, result.stderr)
        assert not marker.exists(), f"{command} ran the code in a {kind} file"


# ------------------------------------------------------------------------------- the state format


# ------------------------------------------------------------------------------- old formats


# ------------------------------------------------------------------------------- safe writes


@pytest.mark.posix
def test_write_atomic_never_writes_through_a_symlink_or_onto_a_device(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    link = tmp_path / "summary.json"
    link.symlink_to(target)
    with pytest.raises(RunError, match=r"it is a symbolic link, not a regular file$"):
        write_atomic(link, "x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RunError, match=r"it is a FIFO, not a regular file$"):
        write_atomic(fifo, "x")
    assert target.read_text() == "precious\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # a symlink planted at the temp name is removed, not followed; the write goes through
    out = tmp_path / "out.json"
    temp_path(out).symlink_to(target)
    write_atomic(out, "new\n")
    assert out.read_text() == "new\n" and target.read_text() == "precious\n"
    assert not os.path.lexists(temp_path(out))


@pytest.mark.skipif(getattr(os, "geteuid", lambda: 1)() != 0, reason="needs root: a device node")
def test_eval_json_onto_a_device_node_is_refused_and_the_node_stays(tmp_path):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    code, line = invoke("eval", "--game", "cartpole", "--random", "--episodes", 1, "--json", node)
    assert (
        code == 1
        and line == f"Error: cannot write {node}: it is a character device, not a regular file"
    )
    assert stat.S_ISCHR(os.lstat(node).st_mode)


@pytest.mark.posix
def test_a_lock_or_metrics_csv_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / ".lock").symlink_to(target)
    with pytest.raises(RunError, match=r"\.lock: it is a symbolic link, not a regular file$"):
        RunLock(locked).acquire()
    metrics = tmp_path / "metrics.csv"
    metrics.symlink_to(target)
    with pytest.raises(RunError, match=r"it is a symbolic link, not a regular file$"):
        open_text(metrics, append=False)
    # a new run into a folder holding such a metrics.csv stops before writing it
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").symlink_to(target)
    code, line = invoke("run", "--out", run_dir, "--steps", 128, *sets())
    assert code == 1 and line.endswith("metrics.csv: it is a symbolic link, not a regular file")
    assert target.read_text() == "precious\n"


def test_a_wandb_id_that_is_not_an_id_is_refused_before_wandb_starts(tmp_path):
    pytest.importorskip("wandb")
    from fasttrain.config.resolve import LogConfig
    from fasttrain.run.dashboards import WandB

    (tmp_path / "wandb_id").write_text("../../../evil-id\n")
    with pytest.raises(ConfigError, match=r"not a W&B run id"):
        WandB(tmp_path, {}, LogConfig(wandb="offline"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wandb_id"]


# ------------------------------------------------------------------------------- one-line errors


@pytest.mark.linux  # /proc and /dev/zero stand for what cannot be written or read
def test_what_a_user_can_type_ends_in_one_line(tmp_path):
    """Each case used to end in a traceback, a hang or a silent wrong result."""
    noise = tmp_path / "noise" / "metrics.csv"
    noise.parent.mkdir()
    noise.write_bytes(bytes(range(256)) * 8)
    study = tmp_path / "sweep"
    study.mkdir()
    (study / "study.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    sweep_file = ROOT / "examples" / "sweep_cartpole.toml"
    cases = {
        "play --fps nan": (["play", "--fps", "nan"], 2, "Invalid value for --fps: 0 (as fast"),
        "play --fps 1e-300": (["play", "--fps", "1e-300"], 2, "0.1 to 1000, got 1e-300"),
        "play --seed -1": (["play", "--seed", "-1"], 2, "-1 is not in the range 0<=x<="),
        "play --seed 2**64": (["play", "--seed", str(2**64)], 2, "is not in the range"),
        "play --gif unwritable": (
            ["play", "--gif", "/proc/fasttrain.gif", "--steps", 2],
            1,
            "Error: cannot write /proc/fasttrain.gif",
        ),
        "play --gif a million steps": (
            ["play", "--gif", tmp_path / "a.gif", "--steps", 1_000_000],
            1,
            "Error: --steps 1,000,000: a GIF holds at most 5,000 steps",
        ),
        "eval --json missing folder": (
            ["eval", "--game", "cartpole", "--random", "--json", tmp_path / "no" / "x.json"],
            1,
            f"Error: cannot write {tmp_path / 'no' / 'x.json'}: folder",
        ),
        "eval --num-envs 1e10": (
            ["eval", "--game", "snake", "--random", "--num-envs", 10**10],
            1,
            "Error: 10,000,000,000 snake envs need",
        ),
        "plot random bytes": (
            ["plot", noise.parent, "--out", tmp_path / "c.png"],
            1,
            f"Error: {noise} is not a metrics.csv",
        ),
        "sweep damaged study.db": (
            ["sweep", "--config", sweep_file, "--out", study],
            1,
            f"Error: {study / 'study.db'} is not a study database this sweep can read",
        ),
        "sweep --out unwritable": (
            ["sweep", "--config", sweep_file, "--out", "/proc/fasttrain-sweep"],
            1,
            "Error: cannot create sweep directory /proc/fasttrain-sweep",
        ),
        "run --out /proc/x": (
            ["run", "--out", "/proc/fasttrain-run", *sets()],
            1,
            "Error: cannot create run directory /proc/fasttrain-run",
        ),
        "config nested 100,000 deep": (
            ["run", "--config", deep],
            1,
            f"Error: config file {deep} nests arrays or tables too deep",
        ),
        "config /dev/zero": (
            ["run", "--config", "/dev/zero"],
            1,
            "Error: config file /dev/zero is a character device, not a regular file",
        ),
        "--set with a newline": (
            ["run", "--set", "ppo.learning_rate=1e-3\nrun.seed = 5"],
            1,
            "Error: --set takes one line, section.key=value",
        ),
        "numba_threads 10000": (
            ["run", "--set", "run.numba_threads=10000"],
            1,
            "Error: run.numba_threads = 10000: Numba has at most",
        ),
        "hidden 1e7": (
            ["run", "--set", "model.hidden=10000000"],
            1,
            "Error: training the model (model.hidden = 10000000) needs",
        ),
        "play --policy random with a checkpoint": (
            ["play", "--policy", "random", "--checkpoint", tmp_path],
            2,
            "Error: --policy random plays without an agent: drop --checkpoint",
        ),
    }
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a default runs/ folder would show here
    try:
        for name, (args, code, words) in cases.items():
            got, line = invoke(*args)
            assert (got, words in line) == (code, True), (name, got, line)
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "a.gif").exists()


@pytest.mark.posix
def test_a_config_fifo_nobody_writes_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    proc = start_cli("run", "--config", fifo, "--out", tmp_path / "run")
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("fasttrain run --config FIFO hangs") from None
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert one_line(result) == f"Error: config file {fifo} is a FIFO, not a regular file"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-iteration Snake run (seed 0)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    code, line = invoke("run", "--out", out, "--steps", 128, *sets())
    assert code == 0, line
    return out


def test_a_resume_with_another_seed_is_refused(finished, tmp_path):
    run_dir = Path(shutil.copytree(finished, tmp_path / "run"))
    before = (run_dir / checkpoint.FILENAME).read_bytes()
    code, line = invoke("run", "--resume", run_dir, "--seed", 5, "--steps", 256)
    assert code == 1
    assert line == (
        "Error: run.seed = 5 on --resume: the run continues the random streams of its seed 0; "
        "leave --seed (and run.seed) out"
    )
    assert (run_dir / checkpoint.FILENAME).read_bytes() == before
    code, line = invoke("run", "--resume", run_dir, "--seed", 0, "--steps", 256)
    assert code == 0, line  # the same seed says nothing new


def test_a_checkpoint_with_non_finite_weights_cannot_play_or_eval(finished, tmp_path):
    run_dir = Path(shutil.copytree(finished, tmp_path / "run"))
    state = checkpoint.load(run_dir)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], math.nan)
    checkpoint.save(
        run_dir / checkpoint.FILENAME, {k: v for k, v in state.items() if k != "format"}
    )
    expected = (
        f"Error: checkpoint {run_dir / checkpoint.FILENAME} holds non-finite weights "
        f"(model.{name}); it cannot play"
    )
    assert invoke("eval", "--run", run_dir, "--episodes", 1) == (1, expected)
    assert invoke("play", "--checkpoint", run_dir, "--steps", 1) == (1, expected)


def test_inspect_prints_what_a_checkpoint_holds_without_loading_it(finished):
    code = CliRunner().invoke(main, ["checkpoint", "inspect", str(finished)])
    assert code.exit_code == 0, code.output
    lines = code.output.splitlines()
    assert re.fullmatch(
        rf"{re.escape(str(finished / 'checkpoint.pt'))}: format 3, [\d,]+ bytes, checksum verified",
        lines[0],
    )
    assert lines[1] == "run: snake, learner ppo, seed 0, device cpu, 16 envs, 1 rank"
    assert "progress: 128 steps, 1 iterations" in lines
    assert re.search(r"^network model: \d+ tensors, [\d,]+ weights \(float32\)$", code.output, re.M)


# ------------------------------------------------------------------------------- the API


def test_api_misuse_ends_in_one_line():
    with pytest.raises(ValueError, match=r"^snake\.reward_fruit = 1e\+300 does not fit float32"):
        fasttrain.make("snake", num_envs=2, reward_fruit=1e300)
    env = fasttrain.make("snake", num_envs=2, height=6, width=6)
    with pytest.raises(ValueError, match=r"^state_dict lacks environment arrays 'obs'"):
        env.load_state_dict({})
    with pytest.raises(ValueError, match=r"^actions must be on the CPU, not meta$"):
        env.step(torch.zeros(2, dtype=torch.int64, device="meta"))
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match=r"^this environment is closed"):
        env.step(torch.zeros(2, dtype=torch.int64))


def test_a_loaded_agent_refuses_observations_of_another_shape(finished):
    agent, _ = load_agent(finished)
    with pytest.raises(
        ValueError,
        match=r"^this agent plays observations of shape \(rows, 4, 6, 6\), got \(3, 5\)$",
    ):
        agent(torch.zeros(3, 5))
    assert agent(torch.zeros(3, 4, 6, 6, dtype=torch.uint8)).shape == (3,)


def test_adapters_cannot_step_after_close():
    from fasttrain.adapters.gym import GymEnv, GymVectorEnv
    from fasttrain.adapters.pettingzoo import parallel_env
    from fasttrain.adapters.sb3 import SB3VecEnv

    vector = GymVectorEnv(fasttrain.make("cartpole", num_envs=2))
    single = GymEnv("cartpole")
    sb3 = SB3VecEnv(fasttrain.make("cartpole", num_envs=2))
    zoo = parallel_env("arena", num_snakes=2)
    zoo.reset()
    for adapter, step in (
        (vector, lambda: vector.step(np.zeros(2, dtype=np.int64))),
        (single, lambda: single.step(0)),
        (sb3, lambda: sb3.step(np.zeros(2, dtype=np.int64))),
        (zoo, lambda: zoo.step(dict.fromkeys(zoo.agents, 0))),
    ):
        adapter.close()
        with pytest.raises(RuntimeError, match=r"^this environment is closed"):
            step()


# ------------------------------------------------------------------------------- torchrun


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.linux
def test_ranks_stop_with_a_checkpoint_when_their_launcher_is_killed(tmp_path):
    out = tmp_path / "run"
    proc = start_cli(
        "run", "--nproc", 2, "--out", out, "--steps", 10**8, *sets("run.checkpoint_interval=1000")
    )
    ranks = []
    try:
        deadline = time.monotonic() + 180
        while not (out / "metrics.csv").exists() or (out / "metrics.csv").stat().st_size == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks never trained"
            time.sleep(0.1)
        ranks = children(proc.pid)
        assert len(ranks) == 2, ranks
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in ranks):
            assert time.monotonic() < deadline, "ranks still running 30 s after their launcher died"
            time.sleep(0.1)
    finally:
        proc.kill()
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    state = checkpoint.load(out)  # they stopped at an iteration boundary and saved
    assert state["global_step"] > 0 and len(state["rank_states"]) == 1

"""The run directory: atomic writes on full or read-only disks, the run lock across processes,
stale temp files, and checkpoints that are corrupt, foreign or of another run."""

from __future__ import annotations

import errno
import io
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from fasttrain import games
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.models import make_policy
from fasttrain.run import checkpoint, rundir
from fasttrain.run.rundir import (
    RunError,
    RunLock,
    check_writable,
    clean_stale_temps,
    json_safe,
    write_atomic,
)
from tests.cli import finish, one_line, start
from tests.conftest import tmpfs


def files(folder) -> dict:
    """Every file under ``folder`` (hidden ones included) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ------------------------------------------------------------------------------- write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "summary.json"
    write_atomic(target, "old\n")
    write_atomic(target, b"new bytes")
    assert files(tmp_path) == {"summary.json": b"new bytes"}


@pytest.mark.parametrize("value", ["checkpoint.pt:x", "checkpoint.pt:0", "checkpoint.pt:", ":2"])
def test_a_malformed_test_hook_is_refused_in_one_line_at_the_first_write(
    tmp_path, monkeypatch, value
):
    monkeypatch.setenv(rundir.PAUSE_BEFORE_RENAME, value)
    with pytest.raises(RunError) as info:
        write_atomic(tmp_path / "summary.json", "{}")  # any file: not only the one it names
    assert str(info.value) == (
        f"FASTTRAIN_TEST_PAUSE_BEFORE_RENAME={value}: not NAME or NAME:K; NAME is a file's name "
        "(checkpoint.pt), K which write of it to hold, 1 or more (a test hook: unset it)"
    )
    assert files(tmp_path) == {}  # nothing written, no temp left
    monkeypatch.setenv(rundir.PAUSE_BEFORE_RENAME, "checkpoint.pt:2")  # other files pass
    write_atomic(tmp_path / "summary.json", "{}")
    assert files(tmp_path) == {"summary.json": b"{}"}


def enospc(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("call", ["write", "fsync"])
def test_a_full_disk_keeps_the_previous_file(call, tmp_path, monkeypatch):
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"previous checkpoint")
    if call == "write":
        real_write = os.write
        written = []

        def write(fd, data):  # half the bytes land, then the disk is full
            if written:
                enospc()
            written.append(real_write(fd, bytes(data)[: len(data) // 2]))
            return written[-1]

        monkeypatch.setattr(os, "write", write)
    else:
        monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(RunError) as info:
        write_atomic(target, b"x" * 1000, what="checkpoint")
    message = str(info.value)
    assert message == (
        f"no space left on device writing {target}; the previous checkpoint is intact"
    )
    assert files(tmp_path) == {"checkpoint.pt": b"previous checkpoint"}


def test_a_failed_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(RunError, match=r"^no space left on device writing \S+summary.json$"):
        write_atomic(tmp_path / "summary.json", "{}")
    assert files(tmp_path) == {}


def test_a_really_full_tmpfs_keeps_the_previous_checkpoint(tmp_path):
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        target = disk / "checkpoint.pt"
        write_atomic(target, b"old" * 1000)
        with pytest.raises(RunError) as info:
            write_atomic(target, os.urandom(1 << 20), what="checkpoint")
        assert str(info.value).startswith("no space left on device writing ")
        assert str(info.value).endswith("; the previous checkpoint is intact")
        assert files(disk) == {"checkpoint.pt": b"old" * 1000}


# ------------------------------------------------------------------------------- check_writable


def test_check_writable_accepts_a_new_folder_and_creates_nothing(tmp_path):
    check_writable(tmp_path / "runs" / "a")
    check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_check_writable_refuses_a_path_under_a_regular_file(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    with pytest.raises(RunError) as info:
        check_writable(tmp_path / "passwd" / "run")
    passwd = tmp_path / "passwd"
    assert str(info.value) == f"cannot create run directory {passwd / 'run'}: {passwd} is a file"
    with pytest.raises(RunError, match="is a file, not a directory"):
        check_writable(tmp_path / "passwd")
    assert files(tmp_path) == {"passwd": b"root:x:0:0\n"}


def test_check_writable_refuses_a_read_only_filesystem(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as disk:
        for folder in (disk, disk / "run"):
            with pytest.raises(RunError) as info:
                check_writable(folder)
            assert str(info.value) == (
                f"run directory {folder} is not writable ({disk}: read-only file system)"
            )


NOBODY = 65534  # the unprivileged user a root test drops to


def as_unprivileged(check) -> str:
    """``check()``'s text, run in a forked child that first drops to an unprivileged user when
    this process is root (permissions do not stop root), else run here."""
    if os.geteuid() != 0:
        return check()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, one check, its answer down the pipe
        try:
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.write(write, check().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    return text


@pytest.mark.posix  # permission bits and fork
def test_check_writable_refuses_a_folder_without_write_permission():
    """Run in every environment: as root (CI's machines) in a child that drops privileges."""
    root = Path(tempfile.mkdtemp(prefix="fasttrain-perm-"))  # pytest's own is root's alone
    root.chmod(0o755)  # the unprivileged child reaches in
    locked = root / "locked"
    locked.mkdir(mode=0o555)

    def check() -> str:
        try:
            check_writable(locked / "run")
        except RunError as exc:
            return str(exc)
        return "no error"

    try:
        assert as_unprivileged(check) == (
            f"run directory {locked / 'run'} is not writable ({locked}: permission denied)"
        )
    finally:
        locked.chmod(0o700)
        shutil.rmtree(root)


# ------------------------------------------------------------------------------- stale temps


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_clean_stale_temps_removes_only_temps_of_dead_writers(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead, alive, own = dead_pid(), sleeper.pid, os.getpid()
        names = {
            f".checkpoint.pt.{dead}.tmp": True,  # killed mid-save
            f".config.toml.{own}.tmp": True,  # this process is not writing it now
            f".checkpoint.pt.{alive}.tmp": False,  # a live writer may still be at it
            "notes.tmp": False,
            ".hidden": False,
            "checkpoint.pt": False,
        }
        for name in names:
            (tmp_path / name).write_bytes(b"x")
        removed = clean_stale_temps(tmp_path)
        assert sorted(p.name for p in removed) == sorted(n for n, stale in names.items() if stale)
        assert sorted(files(tmp_path)) == sorted(n for n, stale in names.items() if not stale)
        with pytest.raises(subprocess.TimeoutExpired):  # asked, not killed (os.kill on Windows)
            sleeper.wait(timeout=0.2)
        clean_stale_temps(tmp_path, held=True)  # the lock holder owns every temp
        assert sorted(files(tmp_path)) == [".hidden", "checkpoint.pt", "notes.tmp"]
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------------------- RunLock

HOLD = """
import sys
from fasttrain.run.rundir import RunLock
lock = RunLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


def test_run_lock_names_the_live_holder_and_is_taken_over_after_it_dies(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunError) as info:
            RunLock(run_dir).acquire()
        assert str(info.value) == (
            f"run directory {run_dir} is in use by process {holder.pid}; "
            "wait for it or choose another --out"
        )
    finally:
        holder.kill()  # SIGKILL: no cleanup, the lock file still names the dead holder
        holder.wait()
    assert (run_dir / ".lock").read_text() == f"{holder.pid}\n"
    (run_dir / f".checkpoint.pt.{holder.pid}.tmp").write_bytes(b"half a save")
    with RunLock(run_dir) as lock:
        assert lock.held
        assert (run_dir / ".lock").read_text() == f"{os.getpid()}\n"
        assert files(run_dir) == {".lock": f"{os.getpid()}\n".encode()}  # its temp is gone
        with pytest.raises(RunError, match=f"in use by process {os.getpid()};"):
            RunLock(run_dir).acquire()  # a second open file of this process is refused too
    assert not lock.held
    with RunLock(run_dir):  # released on exit
        pass


# ------------------------------------------------------------------------------- without POSIX

# Run before the rest of fasttrain is imported: what rundir could take from POSIX is made
# unavailable, as on Windows (fcntl, os.O_NOFOLLOW, os.pwrite, os.pread), and Windows'
# msvcrt.locking is played by POSIX record locks of the same byte range, refused with the errno
# Windows' _locking sets.
WITHOUT_POSIX = """
import errno, fcntl, os, sys

class msvcrt:
    LK_UNLCK, LK_NBLCK = 0, 2

    @staticmethod
    def locking(fd, mode, nbytes):
        start = os.lseek(fd, 0, os.SEEK_CUR)
        op = fcntl.LOCK_UN if mode == msvcrt.LK_UNLCK else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.lockf(fd, op, nbytes, start)
        except OSError:
            raise OSError(errno.EACCES, "Permission denied") from None

sys.modules["fcntl"] = None  # import fcntl raises ImportError
for name in ("O_NOFOLLOW", "pwrite", "pread"):
    delattr(os, name)
from fasttrain.run import rundir
rundir.msvcrt = msvcrt  # not in sys.modules: there it would make subprocess think it is on Windows
"""
# `fasttrain ARGS` without POSIX; at exit it says which lock and open flags rundir used
RUN_WITHOUT_POSIX = (
    WITHOUT_POSIX
    + """
import atexit, runpy
def report():
    from fasttrain.run import rundir
    print(f"fcntl={rundir.fcntl} msvcrt={rundir.msvcrt.__name__} nofollow={rundir.NOFOLLOW}")
atexit.register(report)
sys.argv = ["fasttrain", *sys.argv[1:]]
runpy.run_module("fasttrain.cli", run_name="__main__", alter_sys=True)
"""
)
HOLD_FOR_A_MINUTE = """
import time
from fasttrain.run.rundir import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""
TINY_RUN = [
    *("--steps", 256, "--set", "game.snake.height=6", "--set", "game.snake.width=6"),
    *("--set", "game.snake.ppo.num_envs=16", "--set", "game.snake.ppo.num_steps=8"),
    *("--set", "model.hidden=16", "--set", "log.progress=false", "--set", "log.curves=false"),
    *("--set", "run.compile=off", "--set", "run.torch_threads=1", "--set", "run.numba_threads=1"),
]


@pytest.mark.posix  # fcntl plays msvcrt here
def test_a_run_without_fcntl_o_nofollow_or_pwrite_locks_writes_and_saves(tmp_path):
    """The main path as on Windows: a run is refused while another process holds the lock,
    then trains and saves once it is gone."""
    out = tmp_path / "run"
    holder = start("-c", WITHOUT_POSIX + HOLD_FOR_A_MINUTE, out)
    try:
        assert holder.stdout.readline() == "held\n", finish(holder).stderr
        refused = finish(start("-c", RUN_WITHOUT_POSIX, "run", "--out", out, *TINY_RUN))
        assert one_line(refused) == (
            f"Error: run directory {out} is in use by process {holder.pid}; "
            "wait for it or choose another --out"
        )
        assert files(out) == {".lock": f"{holder.pid}\n".encode()}  # nothing else written
    finally:
        holder.kill()  # no cleanup: the lock file still names the dead holder
        holder.wait()
    result = finish(start("-c", RUN_WITHOUT_POSIX, "run", "--out", out, *TINY_RUN))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fcntl=None msvcrt=msvcrt nofollow=0" in result.stdout
    assert checkpoint.load(out)["global_step"] == 256
    assert files(out)[".lock"] == b""  # released
    assert sorted(files(out)) == [".lock", "checkpoint.pt", "config.toml", "metrics.csv"] + [
        "summary.json"
    ]


@pytest.mark.posix
def test_without_o_nofollow_a_link_is_found_after_the_open_and_its_target_kept(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(rundir, "NOFOLLOW", 0)
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "metrics.csv"
    link.symlink_to(target)  # swapped in after check_regular looked: the open follows it
    for flags in (os.O_WRONLY | os.O_CREAT, os.O_RDWR | os.O_CREAT):
        with pytest.raises(RunError) as info:
            rundir.open_regular(link, flags)
        assert str(info.value) == f"cannot write {link}: not a regular file"
    # a link planted at the temp name is removed, not followed (O_EXCL needs no O_NOFOLLOW)
    rundir.temp_path(tmp_path / "summary.json").symlink_to(target)
    write_atomic(tmp_path / "summary.json", "{}")
    link.unlink()
    (tmp_path / "metrics.csv").write_text("old,rows\n")
    with rundir.open_text(tmp_path / "metrics.csv", append=False) as f:
        f.write("new\n")  # truncated after the open, not by O_TRUNC
    assert files(tmp_path) == {
        "metrics.csv": b"new\n",
        "precious": b"keep me",
        "summary.json": b"{}",
    }


# ------------------------------------------------------------------------------- checkpoints


def config_text(game="snake", algo="ppo", hidden=32, height=6) -> str:
    """The saved config of a small CPU run (the runner saves all keys; any valid subset reads)."""
    board = f"\n[game.snake]\nheight = {height}\nwidth = 6\n" if game == "snake" else ""
    return (
        f'[run]\nalgo = "{algo}"\ndevice = "cpu"\n\n[game]\nname = "{game}"\n{board}\n'
        f"[model]\nhidden = {hidden}\n"
    )


def small_config(**settings) -> cfg.Config:
    return cfg.from_dict(cfg.tomllib.loads(config_text(**settings)))


def model_state(config: cfg.Config) -> dict:
    spec = games.get(config.game.name)
    params = config.params
    obs_shape, num_actions = spec.obs_shape(params), spec.actions(params)
    return make_policy(obs_shape, spec.obs_dtype, num_actions, config.model).state_dict()


def write_checkpoint(path, weights_of: dict | None = None, **settings):
    """A checkpoint as the runner writes it; ``weights_of`` picks a model of other settings."""
    config = small_config(**settings)
    state = {
        "model": model_state(small_config(**(weights_of or settings))),
        "config": config_text(**settings),
        "identity": checkpoint.identity(config),
    }
    checkpoint.save(path, state)
    return path


def test_a_checkpoint_round_trips_and_plays(tmp_path):
    path = write_checkpoint(tmp_path / "checkpoint.pt")
    assert path.read_bytes().startswith(checkpoint.MAGIC)
    state = checkpoint.load(tmp_path)
    assert state["format"] == checkpoint.FORMAT
    assert state["identity"] == checkpoint.identity(small_config())
    act, params = checkpoint.load_agent(tmp_path, game="snake")
    assert params["height"] == 6
    assert act(torch.zeros((1, *state["identity"]["obs_shape"]), dtype=torch.uint8)).shape == (1,)
    assert sorted(files(tmp_path)) == ["checkpoint.pt"]


def test_a_format_1_checkpoint_is_refused_in_one_line(tmp_path):
    """A bare torch.save of a state, as fasttrain wrote while it was developed: refused unread."""
    config = small_config()
    legacy = {"format": 1, "model": model_state(config), "config": config_text()}
    torch.save(legacy, tmp_path / "checkpoint.pt")
    for read in (checkpoint.load, checkpoint.load_agent):
        with pytest.raises(ConfigError, match="^checkpoint " + r"\S+ " + PICKLED + "$"):
            read(tmp_path)


def flip_a_payload_byte(data: bytes) -> bytes:
    middle = checkpoint.HEADER + (len(data) - checkpoint.HEADER) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def foreign_torch_file() -> bytes:
    buffer = io.BytesIO()
    torch.save({"weights": torch.zeros(3), "epoch": 7}, buffer)
    return buffer.getvalue()


PICKLED = (
    r"is a pickle \(torch\.save, or fasttrain's development formats 1 and 2\); fasttrain reads "
    r"only its own format 3 and never unpickles a file"
)
BAD_FILES = {
    "empty": (lambda good: b"", r"is empty$"),
    "truncated": (lambda good: good[: len(good) // 2], r"is corrupt: truncated \(\d+ of \d+ B\)$"),
    "truncated header": (lambda good: good[:20], r"is corrupt: truncated in its header$"),
    "flipped byte": (flip_a_payload_byte, r"is corrupt: checksum mismatch$"),
    "random bytes": (
        lambda good: random.Random(0).randbytes(4096),
        r"is not a fasttrain checkpoint$",
    ),
    "another program's torch file": (
        lambda good: foreign_torch_file(),
        PICKLED + "$",
    ),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_a_bad_checkpoint_is_refused_in_one_line_and_left_alone(kind, tmp_path):
    good = write_checkpoint(tmp_path / "checkpoint.pt").read_bytes()
    damage, message = BAD_FILES[kind]
    (tmp_path / "checkpoint.pt").write_bytes(damage(good))
    before = files(tmp_path)
    for read in (checkpoint.load, checkpoint.load_agent):
        with pytest.raises(ConfigError, match=message) as info:
            read(tmp_path)
        assert "\n" not in str(info.value)
        assert files(tmp_path) == before


def test_weights_that_do_not_fit_the_model_are_refused_in_one_line(tmp_path):
    """Weights of a wider network do not load into the config's; weights too few for the
    config's network are refused before it is built (``checkpoint.check_model_size``)."""
    refusals = {
        64: r"does not fit its ppo model: size mismatch",
        8: r"its config's network \(model.hidden = 32, model.layers = 2\) has 5,696 weights in "
        r"its torso alone and the checkpoint holds 1,277; the config does not fit its weights$",
    }
    for hidden, message in refusals.items():
        write_checkpoint(tmp_path / "checkpoint.pt", weights_of={"hidden": hidden})
        before = files(tmp_path)
        with pytest.raises(ConfigError, match=message) as info:
            checkpoint.load_agent(tmp_path)
        assert "\n" not in str(info.value)
        assert files(tmp_path) == before


def test_a_checkpoint_of_another_game_is_refused(tmp_path):
    write_checkpoint(tmp_path / "checkpoint.pt", game="cartpole")
    before = files(tmp_path)
    with pytest.raises(ConfigError, match=r"^checkpoint was trained on 'cartpole', not 'snake'$"):
        checkpoint.load_agent(tmp_path, game="snake")
    state = checkpoint.load(tmp_path)
    with pytest.raises(ConfigError) as info:
        checkpoint.check_identity(state, small_config())
    assert str(info.value) == "checkpoint is for game 'cartpole', this run is 'snake'"
    assert files(tmp_path) == before


def test_check_identity_names_the_first_difference(tmp_path):
    state = checkpoint.load(write_checkpoint(tmp_path / "checkpoint.pt"))
    checkpoint.check_identity(state, small_config())
    other = {
        "dqn": ({"algo": "dqn"}, "checkpoint is for learner 'ppo', this run uses 'dqn'"),
        "model": ({"hidden": 64}, "checkpoint model.hidden = 32, this run has 64"),
        "params": ({"height": 8}, "checkpoint game.snake.height = 6, this run has 8"),
    }
    for settings, message in other.values():
        with pytest.raises(ConfigError) as info:
            checkpoint.check_identity(state, small_config(**settings))
        assert str(info.value) == message
    num_envs = state["identity"]["num_envs"]
    with pytest.raises(
        ConfigError, match=rf"^checkpoint ppo.num_envs = {num_envs}, this run has 3$"
    ):
        checkpoint.check_identity(state, small_config(), num_envs=3)


def test_json_safe_writes_nan_and_inf_as_null_at_any_depth():
    value = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2, "x"), "e": 0.5}
    assert json_safe(value) == {"a": None, "b": [1.0, None, {"c": None}], "d": [2, "x"], "e": 0.5}

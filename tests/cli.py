"""Running the ``fasttrain`` command in subprocesses, as a user would, and reading its errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout under test, whatever the cwd


def sets(*items: str) -> list[str]:
    """``--set ITEM`` for each of ``items``: a command's settings, one per line of source."""
    return [arg for item in items for arg in ("--set", item)]


def start(*args, cwd=None, env=None) -> subprocess.Popen:
    """``python ARGS``, importing fasttrain from this checkout (``env``: more variables)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
    )


def start_cli(*args, cwd=None, env=None) -> subprocess.Popen:
    return start("-m", "fasttrain.cli", *args, cwd=cwd, env=env)


def finish(proc: subprocess.Popen, timeout=240) -> subprocess.CompletedProcess:
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return finish(start_cli(*args, cwd=cwd))


def cli_pool(calls: dict, jobs: int = 3) -> dict:
    """Run CLI calls (name -> argument list, or (arguments, cwd)) ``jobs`` at a time; their
    results by name."""
    calls = {k: v if isinstance(v, tuple) else (v, None) for k, v in calls.items()}
    return pool(
        {k: (["-m", "fasttrain.cli", *args], cwd) for k, (args, cwd) in calls.items()}, jobs
    )


def pool(calls: dict, jobs: int = 3) -> dict:
    """Run ``python ARGS`` (name -> (ARGS, cwd)) ``jobs`` at a time; their results by name."""
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


def cli_in_process(*args, cwd=None) -> subprocess.CompletedProcess:
    """``fasttrain ARGS`` in this process through click's ``CliRunner``, for a test of what the
    command does rather than of the process it runs in (signals, exit by a signal, import time,
    torchrun and a real terminal need ``cli``): the exit code, stdout and stderr as ``cli`` gives
    them, so ``one_line`` reads either. An exception click did not turn into an exit ends stderr
    in its traceback (``one_line`` then fails the test). The working directory (``cwd``: the one
    the command runs in), torch's and Numba's thread counts and the SIGINT / SIGTERM handlers
    are put back afterwards, as a subprocess would leave them."""
    import signal
    import traceback

    import numba
    import torch
    from click.testing import CliRunner

    from fasttrain.cli import main

    signals = (signal.SIGINT, signal.SIGTERM)
    handlers = {s: signal.getsignal(s) for s in signals}
    threads = torch.get_num_threads(), numba.get_num_threads()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        try:
            runner = CliRunner(mix_stderr=False)  # click < 8.2 mixes them unless told
        except TypeError:
            runner = CliRunner()  # click >= 8.2 keeps stderr apart (and has no mix_stderr)
        result = runner.invoke(main, [str(a) for a in args], prog_name="fasttrain")
    finally:
        os.chdir(here)
        torch.set_num_threads(threads[0])
        numba.set_num_threads(threads[1])
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(
        ["fasttrain", *map(str, args)], result.exit_code, result.stdout, stderr
    )


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


def header(output: str) -> str:
    """A run's first lines (``fasttrain: ...`` and its ``settings: ...``, wrapped to 120
    columns) as the one line they were before wrapping, whatever was printed above them (a
    compile notice on a cold cache)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fasttrain: "))
    text = lines[start]
    for line in lines[start + 1 :]:
        if line.startswith("  "):  # a continuation: the line above ended at " |" or ","
            text += " " + line[2:]
        elif line.startswith("settings: "):
            text += " | " + line
        else:
            break
    return text

"""Shared fixtures: build small environments and put a snake on the board by hand."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

import fasttrain

# Threads for Numba and torch during tests. On a small shared machine, more threads than free cores
# make every parallel launch wait on descheduled threads (1000x slower for small launches); the
# tests that need real parallelism raise it themselves (see ``parallel_threads``).
TEST_THREADS = int(os.environ.get("FASTTRAIN_TEST_THREADS", "1"))

# PPO on Snake 6x6 with a 16-wide network, eager: the smallest trainer the learner tests build.
# What those tests read is set before a compile would start, and the preset's 50M steps would
# start one in a background thread that the next trainer (and the test) waits for.
SMALL_SNAKE = {
    "game": {
        "snake": {
            "height": 6,
            "width": 6,
            "ppo": {"num_envs": 16, "num_steps": 8, "num_minibatches": 2, "update_epochs": 1},
        }
    },
    "model": {"hidden": 16},
    "log": {"progress": False},
    "run": {"compile": "off"},
}


def small_snake(**extra):
    """``SMALL_SNAKE`` with ``extra`` (config sections) laid over it, as a resolved Config."""
    from fasttrain.config import resolve as cfg

    return cfg.from_dict(cfg.merge(SMALL_SNAKE, extra))


# Head displacement (row, col) per direction, as the snake docstring documents it.
DELTA = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}


class SnakeBoard:
    """Helpers to set a snake's state by hand and to read it back.

    Observations are only rewritten by ``step``/``reset``: set the state, step, then check.
    """

    DELTA = DELTA

    @staticmethod
    def make(backend: str = "cpu", num_envs: int = 1, seed: int = 0, **params):
        """A snake VecEnv (the board defaults to 5x5 to keep hand-worked cases small)."""
        params = {"height": 5, "width": 5, **params}
        return fasttrain.make("snake", num_envs=num_envs, backend=backend, seed=seed, **params)

    @staticmethod
    def set(env, cells, direction, fruit, i: int = 0, tail: int = 0):
        """Put a snake on env ``i``: ``cells`` are (row, col) tail first, head last.

        ``fruit`` is a (row, col) or None (no fruit); ``tail`` is the ring slot of the tail cell,
        so a non-zero value makes the body wrap around the ring buffer. Grid, counters and the
        running episode's score/return/length are written consistently.
        """
        st, w = env.state, env.params.width
        num_cells = env.params.height * w
        st["grid"][i] = 0
        st["body"][i] = 0
        for k, (r, c) in enumerate(cells):
            assert 0 <= r < env.params.height and 0 <= c < w, (r, c)
            st["body"][i, (tail + k) % num_cells] = r * w + c
            st["grid"][i, r * w + c] = 1
        st["tail"][i] = tail
        st["length"][i] = len(cells)
        st["direction"][i] = direction
        st["fruit"][i] = -1 if fruit is None else fruit[0] * w + fruit[1]
        st["steps_since_food"][i] = 0
        st["steps"][i] = 0
        for name in ("score", "ep_return", "ep_length"):
            env.arrays[name][i] = 0

    @staticmethod
    def cells(env, i: int = 0) -> list[tuple[int, int]]:
        """The snake of env ``i`` as (row, col) cells, tail first, read from the state."""
        st, w = env.state, env.params.width
        num_cells = env.params.height * w
        tail, length = int(st["tail"][i]), int(st["length"][i])
        out = []
        for k in range(length):
            cell = int(st["body"][i, (tail + k) % num_cells])
            out.append((cell // w, cell % w))
        return out

    @staticmethod
    def fruit(env, i: int = 0):
        """The fruit of env ``i`` as (row, col), or None."""
        f = int(env.state["fruit"][i])
        return None if f < 0 else (f // env.params.width, f % env.params.width)

    @staticmethod
    def expected_obs(height, width, cells, fruit) -> np.ndarray:
        """The observation the docstring specifies for a snake (tail first) and a fruit."""
        obs = np.zeros((4, height, width), dtype=np.uint8)
        for k, (r, c) in enumerate(cells):
            obs[0, r, c] = 1
            obs[3, r, c] = min(k + 1, 255)
        obs[1, cells[-1][0], cells[-1][1]] = 1
        if fruit is not None:
            obs[2, fruit[0], fruit[1]] = 1
        return obs


@pytest.fixture(scope="session")
def snake() -> SnakeBoard:
    """Snake helpers: ``make``, ``set``, ``cells``, ``fruit``, ``expected_obs``."""
    return SnakeBoard()


def pytest_configure(config):
    """Under pytest-xdist (``-n``), give each worker its own share of the cores: a worker then
    runs, and its runs and subprocesses size their threads, as on a machine of that many cores,
    instead of oversubscribing the cores the workers share. Numba was imported above with every
    core in view, so ``parallel_threads`` still runs two threads."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= count:
        os.sched_setaffinity(0, cores[int(worker[2:]) % count :: count])


# The default tier's longest files (their tests' seconds summed, 2-core machine, 2026-11-28:
# 75, 68, 45, 32), collected first: under ``-n 2 --dist loadfile`` xdist hands whole files to
# its workers in collection order, and a long file collected near the end (tests/integration
# sorts last) ran alone on one core while the other worker sat idle.
LONGEST_FIRST = (
    "tests/integration/test_faults.py",
    "tests/fasttrain/learners/test_distributed.py",
    "tests/fasttrain/games/test_contract.py",
    "tests/fasttrain/kernels/test_ptx.py",
)


def pytest_collection_modifyitems(config, items):
    """The ``LONGEST_FIRST`` files first (each file's tests in their order). Tests marked
    ``posix`` (another process's SIGINT / SIGTERM / SIGKILL, fork, FIFOs, symlinks) are skipped
    on Windows, where those do not exist or need privileges; tests marked ``linux`` (/proc)
    everywhere but Linux (docs/platforms.md)."""
    rank = {path: k for k, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable
    skips = {
        "posix": (sys.platform == "win32", "needs POSIX: signals, fork, FIFOs or symlinks"),
        "linux": (sys.platform != "linux", "needs Linux: /proc"),
    }
    for item in items:
        for marker, (skip, reason) in skips.items():
            if skip and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _few_threads():
    """Run the suite with ``TEST_THREADS`` Numba and torch threads."""
    numba_threads, torch_threads = numba.get_num_threads(), torch.get_num_threads()
    numba.set_num_threads(min(TEST_THREADS, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(TEST_THREADS)
    yield
    numba.set_num_threads(numba_threads)
    torch.set_num_threads(torch_threads)


@pytest.fixture(autouse=True)
def _no_compile_left_running():
    """A trainer dropped before its switch leaves its torch.compile running in a background
    thread; it ends with the test that started it, so it never shares dynamo's counters or
    torch's global state with the next one."""
    yield
    from fasttrain.learners.compile import wait_for_background_compiles

    wait_for_background_compiles()


@pytest.fixture
def parallel_threads():
    """Two Numba threads for one test (skipped where Numba may only use one)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba is limited to one thread here")
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    yield 2
    numba.set_num_threads(previous)


@pytest.fixture
def four_cores(monkeypatch):
    """A machine of four cores to size threads on; the suite's thread counts come back after."""
    import numba

    from fasttrain.learners import context

    monkeypatch.setattr(context.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    threads = torch.get_num_threads(), numba.get_num_threads()
    yield min(4, numba.config.NUMBA_NUM_THREADS)
    torch.set_num_threads(threads[0])
    numba.set_num_threads(threads[1])


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    """A tmpfs mounted on ``folder`` (the run-directory and fault tests' full and read-only
    disks); skips the test where mounting is not permitted."""
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

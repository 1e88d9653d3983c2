"""Saying so while Numba compiles: one line before it starts, its seconds when done.

Numba compiles a launcher the first time it is called with new argument types, then keeps it in
its on-disk cache (``cache=True``), so a later process loads it in well under a second. The first
run of a game would otherwise sit silent for half a minute. ``compile_now`` compiles a set of
dispatchers for the arguments they will be launched with, and prints the notice only when Numba
really compiles: nothing on a warm cache, nothing for what this process compiled already.

Notices go to stderr, or to the ``say`` a caller installs with ``notices_to`` (the training run
prints them through its own output).

A damaged cache file (a truncated index ``.nbi`` or data ``.nbc``, from a full disk or a killed
writer) makes Numba's loading fail with an unpickling error; ``compile_now`` then deletes the
files of those launchers, says so in one line and compiles them again.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
from pathlib import Path


def _stderr(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)


_say = [_stderr]  # where notices go: say(text, end) as print's ``end``


@contextlib.contextmanager
def notices_to(say):
    """Send the compile notices made inside the block to ``say(text, end)``."""
    previous, _say[0] = _say[0], say
    try:
        yield
    finally:
        _say[0] = previous


def notice(what: str, backend: str) -> str:
    """The line printed while ``what`` compiles."""
    return f"compiling {what} for the {backend} backend (first run only; cached afterwards)..."


def compile_now(what: str, backend: str, work) -> None:
    """Compile every ``(dispatcher, args)`` of ``work`` for the types of ``args`` now, so that
    the launches with those arguments find it compiled. When Numba has to compile (a cold
    cache), the notice is printed first and the seconds it took after it, on the same line.
    A damaged cache file is deleted, with a one-line note, and the work compiled anew."""
    try:
        _compile(what, backend, work)
    except (pickle.UnpicklingError, EOFError) as exc:  # how a truncated cache file fails
        removed = list(dict.fromkeys(p for dispatcher, _ in work for p in cache_files(dispatcher)))
        if not removed:
            raise
        for path in removed:
            path.unlink(missing_ok=True)
        _say[0](
            f"note: the kernel cache of {what} ({backend}) was damaged ({exc}); deleted "
            f"{len(removed)} files under {removed[0].parent} and compiling it again"
        )
        _compile(what, backend, work)


def cache_files(dispatcher) -> list[Path]:
    """Numba's cache files (index and data) of ``dispatcher``'s source file, wherever Numba
    keeps them: ``__pycache__`` beside it, or under ``NUMBA_CACHE_DIR``."""
    import numba

    source = Path(dispatcher.py_func.__code__.co_filename)
    pattern = f"{source.stem}.*.nb[ic]"
    found = list((source.parent / "__pycache__").glob(pattern))
    if numba.config.CACHE_DIR and os.path.isdir(numba.config.CACHE_DIR):
        found += Path(numba.config.CACHE_DIR).rglob(pattern)
    return sorted(set(found))


def _compile(what: str, backend: str, work) -> None:
    """``compile_now`` without the repair of a damaged cache."""
    from .internals import resolve

    listener, install_listener = (
        resolve("numba.core.event.Listener"),
        resolve("numba.core.event.install_listener"),
    )
    say = _say[0]
    started: list[float] = []

    class Announce(listener):
        """Numba fires ``numba:compile`` only when it compiles, not on a cache hit."""

        def on_start(self, ev):
            if not started:
                started.append(time.perf_counter())
                say(notice(what, backend), end="")

        def on_end(self, ev):
            pass

    try:
        with install_listener("numba:compile", Announce()):
            for dispatcher, args in work:
                dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in args))
    except BaseException:
        if started:
            say(" failed")
        raise
    if started:
        say(f" {time.perf_counter() - started[0]:.1f} s")

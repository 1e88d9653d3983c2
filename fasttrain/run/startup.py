"""Signals while the ``fasttrain`` command starts: a Ctrl-C or SIGTERM before a command has its
own handlers ends the process at once with one line, ``interrupted``, and exit code 128 + the
signal's number (130 / 143), never a ``KeyboardInterrupt`` traceback from inside an import.

``take`` runs first thing in the program (``fasttrain.__main__.main``, the console script; the
top of ``fasttrain.cli`` under ``python -m fasttrain.cli``), before click, torch or Numba are
imported; ``release`` restores Python's own handlers once the command line is ready, so each
command handles signals as it chooses (``run`` saves at an iteration boundary, ``sweep`` writes
what it has). Imports nothing beyond the standard library.

A run's own handlers (``StopSignals``) take over at its first iteration: they ask it to stop at
the next boundary (``RunInterrupted`` carries 130 / 143 out once it saved).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
if hasattr(signal, "SIGBREAK"):  # Windows: Ctrl+Break, the stop another process can send there
    EXIT_CODES[signal.SIGBREAK] = 128 + signal.SIGBREAK
_previous: dict = {}
_held = False


def exit_now(signum, frame):
    """Leave at once: one line, exit code 128 + the signal's number."""
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(EXIT_CODES[signum])


def take() -> None:
    """Route SIGINT and SIGTERM to ``exit_now`` (main thread only; once)."""
    if _previous or threading.current_thread() is not threading.main_thread():
        return
    for signum in EXIT_CODES:
        _previous[signum] = signal.signal(signum, exit_now)


def hold() -> None:
    """This process is the ``fasttrain`` program (``fasttrain.cli.entry``): a command that
    gives back its handlers (``restore``) leaves ``exit_now`` in place until the process
    exits, so a second Ctrl-C or SIGTERM while a stopped run finishes (its summaries, the
    exit) still ends it with 130 / 143, never a signal's death or a traceback."""
    global _held
    _held = True


def leave(code: int) -> None:
    """End the process with ``code`` at once, its output flushed, skipping Python's finalizing,
    where ``fasttrain.cli.entry`` must not go through it:

    - after a run that a signal stopped (it saved and said so): finalizing (seconds of garbage
      collection with torch and Numba loaded) runs with no handler left, so a second signal
      there would end the process by that signal, not with the documented 130 / 143;
    - while a background compile still runs (a signal or an error came before the switch,
      ``fasttrain.learners.compile``): finalizing would end the compile thread, woken inside
      torch's C++ code, by ``pthread_exit``, whose unwinding through C++ frames that may not
      unwind aborts the process ("terminate called without an active exception", exit 134, a
      core dump) after the run had saved.

    Everything a run keeps is written and closed by then (atomic files, the lock released);
    inductor's compile workers watch their parent and leave with it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    logging.shutdown()
    os._exit(code)


def restore(previous: dict) -> None:
    """Give SIGINT and SIGTERM back the ``previous`` handlers, or ``exit_now`` (``hold``)."""
    for signum, handler in previous.items():
        signal.signal(signum, exit_now if _held else handler)


def release() -> None:
    """Give SIGINT and SIGTERM back the handlers they had before ``take``."""
    while _previous:
        signum, handler = _previous.popitem()
        signal.signal(signum, handler)


# ------------------------------------------------------------------------------- a run's


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on SIGINT or SIGTERM after saving; ``exit_code`` is 130 or 143."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = EXIT_CODES.get(signum, 130)


class StopSignals:
    """SIGINT and SIGTERM ask the run to stop at the next iteration boundary; a second one
    stops at once (the last checkpoint stays as it was)."""

    def __init__(self, twice_stops_at_once: bool = True):
        self.signum: int | None = None
        self._previous: dict = {}
        # under torchrun a Ctrl-C reaches each rank twice (the terminal's, then torchrun's
        # forwarded one): there only the iteration boundary stops a rank
        self.twice_stops_at_once = twice_stops_at_once

    def _handle(self, signum, frame):
        if self.signum is not None and self.twice_stops_at_once:
            self.signum = signum  # the second one names the exit code
            # asked twice: give up the iteration in flight, with the second one's exit code
            # wherever it lands (a part's close in a finally block included)
            raise RunInterrupted(signum)
        self.signum = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in EXIT_CODES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

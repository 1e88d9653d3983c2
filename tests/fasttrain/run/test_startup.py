"""fasttrain.run.startup: a Ctrl-C or SIGTERM while the command starts ends it in one line
(``tests/integration/test_faults.py`` sends real signals to the real command)."""

import signal

import pytest

from fasttrain.run import startup


def test_start_up_takes_the_signals_once_and_gives_them_back(monkeypatch):
    """`startup.take` routes SIGINT/SIGTERM to the one-line exit while the command imports;
    `release` restores what was there, so each command handles signals itself (`sweep` relies
    on KeyboardInterrupt)."""
    monkeypatch.setattr(startup, "_previous", {})
    before = {s: signal.getsignal(s) for s in startup.EXIT_CODES}
    startup.take()
    try:
        assert all(signal.getsignal(s) is startup.exit_now for s in startup.EXIT_CODES)
        startup.take()  # a second take must not record exit_now as the handler to restore
    finally:
        startup.release()
    assert {s: signal.getsignal(s) for s in startup.EXIT_CODES} == before


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_exit_now_says_interrupted_and_exits_128_plus_the_signal(signum, code, monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(startup.os, "_exit", exits.append)
    startup.exit_now(signum, None)
    assert exits == [code]
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.skipif(not hasattr(signal, "SIGBREAK"), reason="Windows only: Ctrl-Break")
def test_ctrl_break_exits_149_on_windows(monkeypatch, capsys):
    """Windows sends no SIGTERM to another process: Ctrl-Break is its stop (docs/platforms.md)."""
    assert startup.EXIT_CODES[signal.SIGBREAK] == 149
    exits = []
    monkeypatch.setattr(startup.os, "_exit", exits.append)
    startup.exit_now(signal.SIGBREAK, None)
    assert exits == [149]

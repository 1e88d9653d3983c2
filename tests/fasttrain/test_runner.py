"""The run's parts alone (fasttrain.runner, dashboards.CsvSink, curriculum.Promoter), each
driven by hand-made boundaries, without starting a run."""

from __future__ import annotations

import csv
import math
import os
import signal
from types import SimpleNamespace

import pytest

from fasttrain import metrics
from fasttrain.dashboards import CsvSink
from fasttrain.errors import RunError
from fasttrain.runner import Boundary, NanGuard, OnRow, Signals, StopSignals


def trainer(**fields):
    ctx = SimpleNamespace(updates=fields.pop("updates", 0))
    return SimpleNamespace(global_step=0, iteration=0, ctx=ctx, **fields)


def boundary(t, losses=None, **fields) -> Boundary:
    values = dict(now=0.0, last=False, signum=None, row_due=True)
    return Boundary(t, losses or {}, **{**values, **fields})


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_csv_sink_writes_rows_and_a_resume_trims_those_past_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CsvSink(path)
    for step in (100, 200, 300):
        sink.write({"global_step": step, "time_s": step / 100, "losses/x": step * 2})
    sink.close()
    assert [r["global_step"] for r in rows(path)] == ["100", "200", "300"]
    # a kill mid-row left half a line; the checkpoint is at step 200
    with open(path, "a") as f:
        f.write("400,4.0")
    sink = CsvSink(path, resume_step=200)
    sink.write({"global_step": 300, "time_s": 3.5, "losses/x": 7, "losses/new": 1})
    sink.close()
    written = rows(path)
    assert [r["global_step"] for r in written] == ["100", "200", "300"]
    assert written[-1] == {"global_step": "300", "time_s": "3.5", "losses/x": "7"}  # its columns
    assert path.read_text().count("global_step") == 1  # no second header
    # a fresh run (no resume) starts the file over
    CsvSink(path).close()
    assert path.read_text() == ""


def test_the_nan_guard_counts_skipped_updates_in_a_row_and_stops_at_its_patience(tmp_path):
    t = trainer()
    guard = NanGuard(t, patience=10, out=tmp_path)

    def iteration(updates: int, skipped: int, loss: float = 1.0) -> bool:
        t.ctx.updates += updates
        t.global_step += 10
        losses = {"losses/value_loss": loss, "losses/skipped_updates": skipped}
        return guard.after_iteration(boundary(t, losses))

    assert iteration(4, 0) is False and guard.in_a_row == 0
    assert iteration(4, 4, math.nan) is False and guard.in_a_row == 4  # all four skipped
    assert iteration(4, 0) is False and guard.in_a_row == 0  # a good update ends the run of skips
    assert iteration(4, 2) is False and guard.in_a_row == 2  # some skipped: the last ones, at least
    assert iteration(4, 4) is False and guard.in_a_row == 6  # and the next all skipped: 2 + 4
    t2 = trainer()
    guard = NanGuard(t2, patience=5, out=tmp_path)
    t2.ctx.updates, t2.global_step = 3, 30
    guard.after_iteration(boundary(t2, {"losses/skipped_updates": 3}))
    t2.ctx.updates, t2.global_step = 6, 60
    with pytest.raises(RunError) as stop:
        guard.after_iteration(boundary(t2, {"losses/v": math.inf, "losses/skipped_updates": 3}))
    assert str(stop.value) == (
        "stopped at step 60: 6 updates in a row were skipped for a non-finite losses/v (check "
        "rewards and settings); no checkpoint was written"
    )


def test_a_stop_signal_ends_the_run_at_the_boundary_and_a_second_one_at_once():
    signals = Signals()
    t = trainer()
    with StopSignals() as stop:
        assert signals.after_iteration(boundary(t, signum=None)) is False
        os.kill(os.getpid(), signal.SIGTERM)  # handled: noted for the next boundary
        assert stop.signum == signal.SIGTERM
        assert signals.after_iteration(boundary(t, signum=stop.signum)) is True
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # asked twice: the iteration in flight ends
        assert stop.signum == signal.SIGINT  # the second one names the exit code
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # handlers given back


def test_on_row_ends_the_run_as_if_it_had_finished():
    seen = []
    part = OnRow(lambda row: seen.append(row) or row["global_step"] >= 20)
    t = trainer()
    first = boundary(t, row={"global_step": 10})
    assert part.after_iteration(first) is False and first.last is False
    second = boundary(t, row={"global_step": 20})
    assert part.after_iteration(second) is True and second.last is True and part.stopped_early
    assert part.after_iteration(boundary(t, row=None)) is True  # no row: nothing asked
    assert [r["global_step"] for r in seen] == [10, 20]


def test_episode_means_over_batches_and_the_last_ones_when_none_ended():
    env = SimpleNamespace(
        batches=[
            {"episodes": 2, "return": 1.0, "length": 10.0, "score": 1.0},
            {"episodes": 6, "return": 3.0, "length": 20.0, "score": 2.0},
        ]
    )
    env.stats = lambda: env.batches.pop(0) if env.batches else {}
    t = trainer(env=env, device="cpu")
    episodes = metrics.Episodes(t, SimpleNamespace(enabled=False))
    assert all(math.isnan(v) for v in episodes.take().values())  # before any episode
    episodes.read(), episodes.read()
    assert episodes.take() == {"return": 2.5, "length": 17.5, "score": 1.75}  # weighted by count
    assert episodes.read() == {} and episodes.take() == {
        "return": 2.5,
        "length": 17.5,
        "score": 1.75,
    }

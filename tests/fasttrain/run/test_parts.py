"""The run's parts alone (fasttrain.run.parts), each driven by hand-made boundaries, without
starting a run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from fasttrain.errors import RunError
from fasttrain.run import metrics
from fasttrain.run.parts import (
    Boundary,
    Clock,
    MetricsRow,
    NanGuard,
    OnRow,
    Part,
    Signals,
    Sink,
    TimeLeft,
    check_order,
)


def trainer(**fields):
    ctx = SimpleNamespace(updates=fields.pop("updates", 0))
    return SimpleNamespace(global_step=0, iteration=0, ctx=ctx, **fields)


def boundary(t, losses=None, **fields) -> Boundary:
    values = dict(now=0.0, last=False, signum=None, row_due=True)
    return Boundary(t, losses or {}, **{**values, **fields})


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


def test_a_part_that_overrides_no_hook_never_ends_the_run_and_adds_nothing():
    class Quiet(Part):
        pass

    part, b = Quiet(), boundary(trainer())
    assert part.after_iteration(b) is False and part.state_dict() == {}
    part.close()
    assert b == boundary(trainer())  # the boundary as it was


def test_a_part_that_reads_a_field_a_later_part_writes_is_refused():
    t = trainer()
    episodes = metrics.Episodes(t, SimpleNamespace(enabled=False))
    row, sink = MetricsRow(t, episodes, Clock(None)), Sink(SimpleNamespace())
    check_order([TimeLeft(t, 100), row, sink, OnRow(bool), Signals()])  # the runner's order
    with pytest.raises(ValueError) as late:
        check_order([TimeLeft(t, 100), sink, OnRow(bool), row])
    assert str(late.value) == "Sink reads row before MetricsRow writes it"

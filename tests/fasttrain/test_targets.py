"""fasttrain.targets: the first metrics row whose mean episode metric reaches a value."""

import math

import pytest

from fasttrain.targets import Target, watch


def row(time_s: float, step: int, ret: float = math.nan, score: float = math.nan) -> dict:
    return {
        "time_s": time_s,
        "global_step": step,
        "charts/episodic_return": ret,
        "charts/score": score,
    }


def test_the_first_row_that_reaches_the_value_is_recorded_and_stops_the_run():
    target = Target("return", 10.0)
    assert target(row(1.0, 100, 5.0)) is False and not target.reached
    assert target(row(2.0, 200)) is False  # no episode ended: NaN is neither best nor last
    assert (target.best, target.last) == (5.0, 5.0)
    assert target(row(3.0, 300, 10.0)) is True  # >= the value
    assert (target.seconds, target.steps) == (3.0, 300)
    assert target(row(4.0, 400, 20.0)) is True
    assert (target.seconds, target.steps, target.best, target.last) == (3.0, 300, 20.0, 20.0)


def test_a_target_that_does_not_stop_watches_on():
    target = Target("score", 2.0, stop=False)
    assert target(row(1.0, 64, ret=100.0, score=3.0)) is False
    assert target.reached and (target.seconds, target.steps) == (1.0, 64)
    assert target(row(2.0, 128, score=1.0)) is False
    assert (target.best, target.last) == (3.0, 1.0)


def test_an_unknown_metric_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"^unknown target metric 'length'; valid: return, score$"):
        Target("length", 1.0)


def test_watch_stops_when_every_stopping_target_is_reached():
    ret, score, seen = Target("return", 10.0), Target("score", 3.0), Target("return", 99, False)
    on_row = watch(ret, score, seen)
    assert on_row(row(1.0, 10, ret=12.0, score=1.0)) is False  # the score is not there yet
    assert on_row(row(2.0, 20, ret=5.0, score=3.0)) is True
    assert (ret.steps, score.steps, seen.reached, seen.best) == (10, 20, False, 12.0)


def test_watch_with_no_stopping_target_never_stops():
    on_row = watch(Target("return", 0.0, stop=False))
    assert on_row(row(1.0, 10, 1.0)) is False
    assert watch()(row(1.0, 10, 1.0)) is False

"""Behaviour held to files recorded before a change (``tests/reference.py``): every learner
family, straight and resumed, leaves the same metrics.csv rows (but their time columns) and the
same weights, bit for bit, on every x86 machine class."""

from __future__ import annotations

import pytest

from tests.cli import finish, start
from tests.reference import CASES

QUICK = [name for name, (_, _, slow) in CASES.items() if not slow]
SLOW = [name for name, (_, _, slow) in CASES.items() if slow]


def check(names: list[str]) -> None:
    result = finish(start("-m", "tests.reference", "check", *names), timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert f"{len(names)} passed, 0 failed" in result.stdout


def test_every_learner_family_trains_and_resumes_as_recorded():
    check(QUICK)


@pytest.mark.slow
def test_a_compiled_run_trains_and_resumes_as_recorded():
    check(SLOW)


def test_a_changed_weight_or_row_is_found(tmp_path):
    """The comparison can fail: a row value and a weight digest changed are both named."""
    from tests.reference import differences

    expected = {"straight": {"run": {"rows": [{"a": "1"}], "weights": {"w": "ab 1"}}}}
    found = {"straight": {"run": {"rows": [{"a": "2"}], "weights": {"w": "cd 1"}}}}
    lines = differences(expected, found)
    assert any("rows[0]/a" in line for line in lines)
    assert any("weights/w" in line for line in lines)
    assert differences(expected, expected) == []

"""The tree is formatted and lint-clean under the pinned ruff (pyproject's `test` extra)."""

import shutil
import subprocess

import pytest

from tests.cli import ROOT


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (it comes with the `test` extra)")
    result = subprocess.run(["ruff", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr

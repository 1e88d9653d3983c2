"""The ``fasttrain.kernels`` package (``fasttrain/kernels/__init__.py``): importing it asks
OpenMP for a short spin before waiting threads sleep, unless the user chose already. Each case
runs in a fresh interpreter: what the import does is what is tested."""

import os
import subprocess
import sys

import pytest

from tests.cli import ROOT

READ = (
    "import os, fasttrain.kernels\n"
    "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))\n"
)


def imported_with(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    result = subprocess.run(
        [sys.executable, "-c", READ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**clean, **env},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(
    "env, seen",
    [
        ({}, "PASSIVE 1000"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
        ({"GOMP_SPINCOUNT": "50"}, "None 50"),
    ],
    ids=["unset", "wait policy set", "spin count set"],
)
def test_openmp_waits_passively_after_a_short_spin_unless_the_user_chose(env, seen):
    assert imported_with(**env) == seen

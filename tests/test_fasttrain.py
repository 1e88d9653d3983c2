"""The ``fasttrain`` package itself (``fasttrain/__init__.py``): ``import fasttrain`` is light
(``make``, ``VecEnv`` and ``games`` load on first use), and its games register with Gymnasium in
either import order, and it sets OpenMP's wait policy unless the user chose one. Each runs in a
fresh interpreter: what an import does is what is tested."""

import os
import subprocess
import sys

import pytest

from tests.cli import ROOT


def python(code: str) -> subprocess.CompletedProcess:
    """``python -c CODE`` importing this checkout."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_import_fasttrain_loads_neither_torch_nor_numba_until_asked():
    result = python(
        "import sys, fasttrain\n"
        "assert not {'torch', 'numba', 'fasttrain.games'} & set(sys.modules), 'eager'\n"
        "assert fasttrain.games is sys.modules['fasttrain.games']\n"
        "assert 'snake' in fasttrain.games.names() and 'torch' not in sys.modules\n"
        "assert {'make', 'VecEnv', 'games'} <= set(fasttrain.__all__)\n"
        "try:\n"
        "    fasttrain.nothing\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "module 'fasttrain' has no attribute 'nothing'\n"


@pytest.mark.parametrize(
    "code",
    [
        "import fasttrain, sys; assert 'gymnasium' not in sys.modules; import gymnasium",
        "import gymnasium, fasttrain",
    ],
    ids=["fasttrain-first", "gymnasium-first"],
)
def test_gymnasium_make_works_in_either_import_order(code):
    pytest.importorskip("gymnasium")
    script = (
        f"{code}\n"
        "env = gymnasium.make('fasttrain/Snake-v0', height=6, width=6)\n"
        "obs, _ = env.reset(seed=0)\n"
        "assert obs.shape == (4, 6, 6) == env.observation_space.shape, obs.shape\n"
        "print('ok')\n"
    )
    done = python(script)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


READ = (
    "import os, fasttrain\n"
    "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))\n"
)


def imported_with(read: str = READ, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    result = subprocess.run(
        [sys.executable, "-c", read],
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
        ({}, "PASSIVE 10000"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
        ({"GOMP_SPINCOUNT": "50"}, "None 50"),
    ],
    ids=["unset", "wait policy set", "spin count set"],
)
def test_openmp_waits_passively_after_a_short_spin_unless_the_user_chose(env, seen):
    assert imported_with(**env) == seen


def test_the_learner_and_the_kernels_load_openmp_with_the_same_setting():
    """Set by ``import fasttrain``, before torch and Numba load libgomp whichever of them a
    caller reaches first (a benchmark imported torch first and ran at libgomp's default while
    a run ran at fasttrain's setting: 1.9x apart on PufferLib's CartPole settings)."""
    read = (
        "import os, sys\n"
        "from fasttrain.learners import base\n"  # imports torch
        "assert 'torch' in sys.modules\n"
        "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))\n"
    )
    assert imported_with(read) == "PASSIVE 10000"

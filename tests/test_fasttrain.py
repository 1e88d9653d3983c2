"""The ``fasttrain`` package itself (``fasttrain/__init__.py``): ``import fasttrain`` is light
(``make``, ``VecEnv`` and ``games`` load on first use), and its games register with Gymnasium in
either import order. Each runs in a fresh interpreter: what an import does is what is tested."""

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

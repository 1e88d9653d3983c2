"""Every script in examples/ runs to the end with a tiny budget (FASTTRAIN_EXAMPLE_STEPS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))

# A line each script prints only when its main claim held; scripts not listed must exit 0.
EXPECTED = {
    "01_train_snake.py": ("trained: mean score", "played one episode"),
    "02_write_a_game.py": ("python and cpu agree on 50 steps x 64 envs", "PPO on catch"),
    "03_embed_kernels.py": (
        "np.from_dlpack(obs) shares memory: True",
        "torch.from_dlpack(rewards) shares memory: True",
    ),
    "04_sb3.py": ("SB3 PPO on fasttrain cartpole: 2,048 steps", "evaluation over 16 episodes"),
}
NEEDS = {"04_sb3.py": "stable_baselines3"}


def test_examples_are_found():
    assert {s.name for s in SCRIPTS} >= set(EXPECTED)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_example_runs(script, tmp_path):
    if script.name in NEEDS:
        pytest.importorskip(NEEDS[script.name])
    env = {**os.environ, "FASTTRAIN_EXAMPLE_STEPS": "2048", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert result.stdout.strip(), "an example should say what it did"
    for line in EXPECTED.get(script.name, ()):
        assert line in result.stdout, output[-3000:]

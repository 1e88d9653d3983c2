"""Every script in examples/ runs to the end with a tiny budget (FASTTRAIN_EXAMPLE_STEPS),
through each of its stages, and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli import ROOT

EXAMPLES = ROOT / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))

# Lines each script prints as it gets through a stage (scripts not listed must exit 0). Two are
# claims checked by the script itself: 02 prints its agreement line after
# assert_backends_agree passed, 03 prints what its own zero-copy checks found.
STAGES = {
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
    assert {s.name for s in SCRIPTS} >= set(STAGES)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_example_runs_through_its_stages(script, tmp_path):
    if script.name in NEEDS:
        pytest.importorskip(NEEDS[script.name])
    temp = tmp_path / "temp"  # the scripts' temporary folders, which must be gone at the end
    temp.mkdir()
    env = {
        **os.environ,
        "FASTTRAIN_EXAMPLE_STEPS": "2048",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": str(temp),
        # torch's compile cache stays where it was (it lives in the temp folder by default)
        "TORCHINDUCTOR_CACHE_DIR": str(Path(tempfile.gettempdir()) / "torchinductor_ci"),
    }
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
    for line in STAGES.get(script.name, ()):
        assert line in result.stdout, output[-3000:]
    left = [p.name for p in temp.iterdir() if p.name.startswith("fasttrain")]
    assert not left, f"the example left {left} in the temp folder"

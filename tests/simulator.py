"""Run a script on Numba's CUDA simulator, in a subprocess: the simulator is chosen when
numba.cuda is first imported, so it cannot be switched on inside the test process."""

from __future__ import annotations

import os
import subprocess
import sys


def run_on_simulator(script: str, *argv: str, cwd) -> subprocess.CompletedProcess:
    """``python -c script *argv`` with ``NUMBA_ENABLE_CUDASIM=1``; output captured as text."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    return subprocess.run(
        [sys.executable, "-c", script, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )

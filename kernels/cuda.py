"""The ``cuda`` backend: numba-cuda kernels over CuPy memory (issue 4; not built yet).

``cuda_problem()`` says what is missing on this machine, so that ``backend="cuda"`` and
``--device cuda`` fail with one clear line before any work starts.
"""

from __future__ import annotations

import os

INSTALL_HINT = "install the GPU extra with: pip install 'fasttrain[cuda]'"


def cuda_problem() -> str | None:
    """None when the cuda backend can run here, else a one-line reason."""
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    try:
        from numba import cuda
    except ImportError:
        return f"numba-cuda is not installed; {INSTALL_HINT}"
    if not simulator:
        try:
            import cupy  # noqa: F401
        except ImportError:
            return f"CuPy is not installed; {INSTALL_HINT}"
        try:
            if not cuda.is_available():
                return "no CUDA GPU is visible (numba.cuda.is_available() is False)"
        except Exception as exc:  # driver errors surface here
            return f"CUDA is not usable: {exc}"
    return "the cuda backend is not implemented yet in this version of fasttrain"


class CUDABackend:
    """Placeholder that explains why the cuda backend cannot run."""

    name = "cuda"

    def __init__(self):
        raise RuntimeError(f"backend 'cuda' is not available: {cuda_problem()}")

"""The ``cuda`` backend: the same game source compiled by numba-cuda, memory owned by CuPy.

One fused kernel per step, one thread per environment (bounds-guarded). Arrays are CuPy arrays
(torch reads them through DLPack); launches go to the legacy default stream, which torch and CuPy
also use unless told otherwise, so kernels and torch work are ordered without any host sync.

Under ``NUMBA_ENABLE_CUDASIM=1`` (no GPU, no CuPy) the kernels run on Numba's simulator over
NumPy arrays: slow, but it runs exactly this code path, so CI exercises it.
"""

from __future__ import annotations

import os

import numpy as np

from .backends import Launchers
from .build import load_launchers, retarget
from .spec import GameSpec

INSTALL_HINT = "install the GPU extra with: pip install 'fasttrain[cuda]'"
THREADS_PER_BLOCK = 256


def simulator() -> bool:
    """True when Numba's CUDA simulator is switched on (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def cuda_problem() -> str | None:
    """None when the cuda backend can run here (a GPU, or the simulator), else a one-line reason."""
    try:
        from numba import cuda
    except ImportError:
        return f"numba-cuda is not installed; {INSTALL_HINT}"
    if simulator():
        return None
    try:
        import cupy  # noqa: F401
    except ImportError:
        return f"CuPy is not installed; {INSTALL_HINT}"
    try:
        if not cuda.is_available():
            return "no CUDA GPU is visible (numba.cuda.is_available() is False)"
    except Exception as exc:  # driver problems surface here
        return f"CUDA is not usable: {exc}"
    return None


class CUDABackend:
    """numba-cuda kernels over CuPy arrays (NumPy arrays under the simulator)."""

    name = "cuda"
    device = "cuda"
    validates_in_kernel = False  # a kernel cannot stop its siblings: check on the host first

    def __init__(self):
        problem = cuda_problem()
        if problem is not None:
            raise RuntimeError(f"backend 'cuda' is not available: {problem}")
        if simulator():
            self.xp = np
        else:
            import cupy

            self.xp = cupy
        self._cache: dict[str, Launchers] = {}

    def compile(self, spec: GameSpec) -> Launchers:
        if spec.name not in self._cache:
            from numba import cuda

            def device_fn(fn):
                return cuda.jit(device=True)(fn)

            memo: dict = {}
            module = load_launchers(
                spec,
                {
                    "step_one": retarget(spec.step_one, device_fn, memo),
                    "reset_one": retarget(spec.reset_one, device_fn, memo),
                    "cuda": cuda,
                    "prange": range,
                },
                f"cuda sim={simulator()}",
            )
            cache = not simulator()
            self._cache[spec.name] = Launchers(
                cuda.jit(module.step_kernel, cache=cache),
                cuda.jit(module.reset_kernel, cache=cache),
            )
        return self._cache[spec.name]

    @staticmethod
    def _grid(num_envs: int) -> tuple[int, int]:
        return (num_envs + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, THREADS_PER_BLOCK

    def _device_args(self, args: tuple) -> tuple:
        if self.xp is not np:
            return args
        # the simulator copies host arrays in and back out around a launch, so aliased views
        # (obs, obs_flat, obs_words) would overwrite each other: wrap them as its device arrays
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return tuple(FakeCUDAArray(a) if isinstance(a, np.ndarray) else a for a in args)

    def launch_step(self, launchers: Launchers, args: tuple, num_envs: int) -> int:
        launchers.step[self._grid(num_envs)](*self._device_args(args))
        return -1

    def launch_reset(self, launchers: Launchers, args: tuple, num_envs: int) -> None:
        launchers.reset[self._grid(num_envs)](*self._device_args(args))

    def to_host(self, array):
        return array if self.xp is np else self.xp.asnumpy(array)

    def synchronize(self):
        if self.xp is not np:
            self.xp.cuda.get_current_stream().synchronize()

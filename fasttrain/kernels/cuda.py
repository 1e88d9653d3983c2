"""The ``cuda`` backend: the same game source compiled by numba-cuda, memory owned by CuPy.

One fused kernel per step, one thread per environment (bounds-guarded). Arrays are CuPy arrays
(torch reads them through DLPack). Launch arguments are converted to Numba device arrays once,
when a buffer set is first used, with no stream synchronisation (``device.device_args``):
converting CuPy arrays at every launch would cost ~25 conversions and, under the CUDA Array
Interface v3, a stream synchronisation per array. Kernels launch on the stream the caller names
(``fasttrain.VecEnv`` passes torch's current stream), so they are ordered with the learner's work
and the rollout loop never waits on the host.

Under ``NUMBA_ENABLE_CUDASIM=1`` (no GPU, no CuPy) the kernels run on Numba's simulator over
NumPy arrays: slow, but it runs exactly this code path, so CI exercises it. ``ptx.py`` compiles
the same kernels to PTX offline (no GPU), for CI and the register report.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np

from .build import Launchers, game_functions, load_launchers
from .device import cuda_problem, device_args, numba_stream, simulator
from .spec import GameSpec

THREADS_PER_BLOCK = 256


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
        self._cache: dict[GameSpec, Launchers] = {}  # by spec: a replaced game recompiles
        self._configs: dict[tuple, object] = {}

    def compile(self, spec: GameSpec) -> Launchers:
        if spec not in self._cache:
            from numba import cuda

            module = kernel_module(spec, cuda, f"cuda sim={simulator()}")
            cache = not simulator()
            self._cache[spec] = Launchers(
                cuda.jit(module.step_kernel, cache=cache),
                cuda.jit(module.reset_kernel, cache=cache),
            )
        return self._cache[spec]

    def prepare_args(self, args: tuple) -> tuple:
        """Launch arguments as device arrays: done once per buffer set, never per step."""
        return device_args(args)

    def warm_up(self, spec: GameSpec, launchers: Launchers, step_args, reset_args) -> None:
        """Nothing ahead of time: numba-cuda compiles (or loads) at the first launches."""

    def _launch(self, kernel, num_envs: int, stream: int):
        key = (id(kernel), num_envs, stream)
        config = self._configs.get(key)
        if config is None:
            blocks = (num_envs + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
            config = self._configs[key] = kernel[blocks, THREADS_PER_BLOCK, numba_stream(stream)]
        return config

    def launch_step(self, launchers: Launchers, args: tuple, num_envs: int, stream: int = 0):
        self._launch(launchers.step, num_envs, stream)(*args)
        return -1

    def launch_reset(self, launchers: Launchers, args: tuple, num_envs: int, stream: int = 0):
        self._launch(launchers.reset, num_envs, stream)(*args)

    def on_stream(self, stream: int):
        """Context in which CuPy work (fills, reductions) runs on ``stream`` (0: the default)."""
        if stream == 0 or self.xp is np:
            return contextlib.nullcontext()
        return self.xp.cuda.ExternalStream(stream)

    def to_host(self, array):
        return array if self.xp is np else self.xp.asnumpy(array)

    def synchronize(self):
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()


def kernel_module(spec: GameSpec, cuda, tag: str) -> types.ModuleType:
    """The generated launcher module with the game's call graph as CUDA device functions."""

    def device_fn(fn):
        return cuda.jit(device=True)(fn)

    return load_launchers(
        spec, {**game_functions(spec, device_fn), "cuda": cuda, "prange": range}, tag
    )

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
import functools
import types

import numpy as np

from .build import Launchers, game_functions, load_launchers
from .device import cuda_problem, device_args, numba_stream, simulator
from .spec import GameSpec

THREADS_PER_BLOCK = 256  # the most threads a block gets (2^20 envs: 4,096 blocks)
WARP = 32


def threads_per_block(num_envs: int, multiprocessors: int) -> int:
    """Threads per block for ``num_envs`` threads: the fewest (a warp at least, a power of two,
    at most ``THREADS_PER_BLOCK``) that still give every multiprocessor a block.

    A thread steps one env through serial, latency-bound work (Snake writes 576 observation
    bytes one by one), so at a preset's sizes what counts is how many multiprocessors issue it:
    512 envs in blocks of 256 ran on 2 of an H200's 132, in blocks of 32 they run on 16."""
    per_sm = -(-num_envs // max(multiprocessors, 1))
    threads = min(WARP, THREADS_PER_BLOCK)
    while threads < THREADS_PER_BLOCK and threads < per_sm:
        threads *= 2
    return threads


@functools.cache
def multiprocessors() -> int:
    """The current GPU's multiprocessor count (1 under the simulator), read once."""
    if simulator():
        return 1
    from numba import cuda

    return cuda.get_current_device().MULTIPROCESSOR_COUNT


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
        # spread a few envs over the multiprocessors (threads_per_block); False: blocks of
        # THREADS_PER_BLOCK whatever the count (the layout before, kept for the benchmark)
        self.spread = True

    def block_size(self, num_envs: int) -> int:
        """Threads per block of a launch over ``num_envs`` envs."""
        if not self.spread:
            return THREADS_PER_BLOCK
        return threads_per_block(num_envs, multiprocessors())

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
        key = (id(kernel), num_envs, stream, self.spread)
        config = self._configs.get(key)
        if config is None:
            threads = self.block_size(num_envs)
            blocks = (num_envs + threads - 1) // threads
            config = self._configs[key] = kernel[blocks, threads, numba_stream(stream)]
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

"""The ``cuda`` backend: the same game source compiled by numba-cuda, memory owned by CuPy.

One fused kernel per step, one thread per environment (bounds-guarded). Arrays are CuPy arrays
(torch reads them through DLPack). Launch arguments are converted to Numba device arrays once,
when a buffer set is first used, with no stream synchronisation (``as_cuda_array(sync=False)``):
converting CuPy arrays at every launch would cost ~25 conversions and, under the CUDA Array
Interface v3, a stream synchronisation per array. Kernels launch on the stream the caller names
(``fasttrain.VecEnv`` passes torch's current stream), so they are ordered with the learner's work
and the rollout loop never waits on the host.

Under ``NUMBA_ENABLE_CUDASIM=1`` (no GPU, no CuPy) the kernels run on Numba's simulator over
NumPy arrays: slow, but it runs exactly this code path, so CI exercises it. ``compile_ptx``
compiles the real kernels to PTX without a GPU (numba-cuda and NVVM only), so CI also checks that
every game compiles for the hardware target; ``python -m fasttrain.kernels.cuda`` reports each
kernel's registers and spills when ``ptxas`` is at hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import types

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
    if getattr(cuda, "implementation", None) != "NVIDIA":
        return f"numba-cuda is not installed (numba's CUDA target is deprecated); {INSTALL_HINT}"
    try:
        if not cuda.is_available():
            return (
                "no CUDA GPU is visible (numba.cuda.is_available() is False): the cuda device "
                f"needs an NVIDIA GPU and its driver; then {INSTALL_HINT}"
            )
    except Exception as exc:  # driver problems surface here
        return f"CUDA is not usable: {exc}"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return f"CuPy is not installed; {INSTALL_HINT}"
    return None


def device_args(args) -> tuple:
    """Kernel arguments with every array converted once to a Numba device array.

    CuPy arrays and torch CUDA tensors (anything with ``__cuda_array_interface__``) become
    ``DeviceNDArray`` views without a stream synchronisation; under the simulator NumPy arrays
    are wrapped as its device arrays, since it would otherwise copy each one in and back out
    around a launch and aliased views (``obs``, ``obs_flat``, ``obs_words``) would overwrite
    each other. Scalars pass through.
    """
    if simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        def convert(a):
            return FakeCUDAArray(a) if isinstance(a, np.ndarray) else a

    else:
        from numba import cuda
        from numba.cuda.cudadrv.devicearray import is_cuda_ndarray

        def convert(a):
            if cuda.is_cuda_array(a) and not is_cuda_ndarray(a):
                return cuda.as_cuda_array(a, sync=False)
            return a

    return tuple(convert(a) for a in args)


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
        self._configs: dict[tuple, object] = {}

    def compile(self, spec: GameSpec) -> Launchers:
        if spec.name not in self._cache:
            from numba import cuda

            module = _kernel_module(spec, cuda, f"cuda sim={simulator()}")
            cache = not simulator()
            self._cache[spec.name] = Launchers(
                cuda.jit(module.step_kernel, cache=cache),
                cuda.jit(module.reset_kernel, cache=cache),
            )
        return self._cache[spec.name]

    def prepare_args(self, args: tuple) -> tuple:
        """Launch arguments as device arrays: done once per buffer set, never per step."""
        return device_args(args)

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


_STREAMS: dict[int, object] = {}


def numba_stream(pointer: int):
    """A Numba stream for a raw ``cudaStream_t`` (0, the legacy default stream, stays 0)."""
    if pointer == 0 or simulator():
        return 0
    if pointer not in _STREAMS:
        from numba import cuda

        _STREAMS[pointer] = cuda.external_stream(pointer)
    return _STREAMS[pointer]


def _kernel_module(spec: GameSpec, cuda, tag: str) -> types.ModuleType:
    """The generated launcher module with the game's call graph as CUDA device functions."""

    def device_fn(fn):
        return cuda.jit(device=True)(fn)

    memo: dict = {}
    return load_launchers(
        spec,
        {
            "step_one": retarget(spec.step_one, device_fn, memo),
            "reset_one": retarget(spec.reset_one, device_fn, memo),
            "cuda": cuda,
            "prange": range,
        },
        tag,
    )


# ------------------------------------------------------------------------------ offline compile


@contextlib.contextmanager
def _target_cc(cc: tuple[int, int]):
    """Make numba-cuda compile device functions for ``cc`` without asking a (missing) GPU.

    numba-cuda asks the current device for its compute capability when a kernel calls a device
    function; this swaps that query for ``cc`` for the duration of an offline compile.
    """
    from numba.cuda import dispatcher

    if not hasattr(dispatcher, "get_current_device"):
        raise RuntimeError("this numba-cuda version cannot compile device functions offline")
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def compile_ptx(spec: GameSpec, params=None, cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX of a game's step and reset kernels for compute capability ``cc``, with no GPU.

    Uses the real numba-cuda compiler and NVVM (``pip install 'numba-cuda[cu12]'``), not the
    simulator; argument types are those of the buffers ``KernelEnv`` allocates.

    Returns:
        ``{"step_kernel": ptx, "reset_kernel": ptx}``.
    """
    import numba
    from numba import cuda

    from .env import KernelEnv

    if simulator():
        raise RuntimeError("compile_ptx needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    params = spec.make_params() if params is None else params
    host = KernelEnv(spec, 1, "python", params)  # same buffers and argument order, on the host
    module = _kernel_module(spec, cuda, f"ptx cc={cc}")
    out = {}
    with _target_cc(cc):
        for name, args in (("step_kernel", host._step_args), ("reset_kernel", host._reset_args)):
            signature = tuple(numba.typeof(a) for a in args)
            out[name] = cuda.compile_ptx(getattr(module, name), signature, cc=cc)[0]
    return out


def compile_gae_ptx(cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of the GAE kernel (float32 storage, as the PPO trainer passes it) for ``cc``."""
    from numba import cuda
    from numba import types as nt

    from .gae import gae_kernel_cuda

    if simulator():
        raise RuntimeError("compile_ptx needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    f2, f1, b2 = nt.float32[:, ::1], nt.float32[::1], nt.boolean[:, ::1]
    signature = (f2, f2, f1, f2, b2, b2, nt.float64, nt.float64, f2, f2)
    with _target_cc(cc):
        return cuda.compile_ptx(gae_kernel_cuda(jit=False), signature, cc=cc)[0]


def find_ptxas() -> str | None:
    """Path of ``ptxas`` (on PATH, or from the ``nvidia-cuda-nvcc-cu12`` wheel), or None."""
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc as nvcc
    except ImportError:
        return None
    for root in getattr(nvcc, "__path__", []):
        candidate = os.path.join(root, "bin", "ptxas")
        if os.path.exists(candidate):
            return candidate
    return None


def ptxas_info(ptx: str, cc: tuple[int, int] = (9, 0)) -> str:
    """``ptxas -v`` output (registers, spills, stack) for ``ptx``; raises if it fails."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise RuntimeError("ptxas not found: pip install nvidia-cuda-nvcc-cu12")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        result = subprocess.run(
            [ptxas, f"-arch=sm_{cc[0]}{cc[1]}", "-v", source, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        raise RuntimeError(f"ptxas failed: {result.stderr.strip()[-2000:]}")
    return result.stderr


def main(argv=None) -> int:
    """``python -m fasttrain.kernels.cuda [GAME ...] [--cc 9.0]``: compile offline and report."""
    import argparse
    import re

    from fasttrain import games

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("games", nargs="*", help=f"default: all ({', '.join(games.names())})")
    parser.add_argument("--cc", default="9.0", help="compute capability, e.g. 8.0, 9.0")
    opts = parser.parse_args(argv)
    cc = tuple(int(x) for x in opts.cc.split("."))
    kernels = [(name, kernel, ptx) for name in opts.games or games.names()
               for kernel, ptx in compile_ptx(games.get(name), cc=cc).items()]  # fmt: skip
    kernels.append(("ppo", "gae_kernel", compile_gae_ptx(cc)))
    for name, kernel, ptx in kernels:
        line = f"{name:10s} {kernel:13s} sm_{cc[0]}{cc[1]}: PTX {len(ptx):,} chars"
        if find_ptxas():
            info = ptxas_info(ptx, cc)
            regs = max(int(r) for r in re.findall(r"Used (\d+) registers", info))
            spills = sum(int(s) for s in re.findall(r"(\d+) bytes spill stores", info))
            line += f", {regs} registers, {spills} B spill stores"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

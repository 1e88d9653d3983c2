"""Offline PTX and register report: the real numba-cuda compiler, with no GPU.

``compile_ptx`` turns a game's generated step and reset kernels into PTX (over the env-minor
layout the GPU uses), ``compile_column_ptx`` does the same for a learner column kernel (GAE)
and ``compile_copy_rows_ptx`` for the copy of env-minor observations into rows, all with
numba-cuda and NVVM only (``pip install 'numba-cuda[cu12]'``), so CI checks that every kernel
compiles for the hardware target. ``report`` adds each kernel's registers and spills where
``ptxas`` is at hand; it works on the specs it is given (``python -m fasttrain.bench.ptx`` passes
the registered games).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import types

import numpy as np

from . import gae, qlambda
from .columns import ColumnKernel
from .cuda import copy_rows_module, kernel_module
from .env import KernelEnv
from .gpu import numba_cuda, simulator
from .internals import InternalMissing, assign, resolve
from .spec import GameSpec


def _require_compiler():
    """Raise one line unless numba-cuda's hardware compiler (not the simulator) is usable."""
    if simulator():
        raise RuntimeError("offline PTX needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    cuda = numba_cuda()

    if getattr(cuda, "implementation", None) != "NVIDIA":
        raise RuntimeError("offline PTX needs numba-cuda with NVVM: pip install 'numba-cuda[cu12]'")


@contextlib.contextmanager
def _target_cc(cc: tuple[int, int]):
    """Make numba-cuda compile device functions for ``cc`` without asking a (missing) GPU.

    numba-cuda asks the current device for its compute capability when a kernel calls a device
    function; this swaps that query for ``cc`` for the duration of an offline compile.
    """
    path = "numba.cuda.dispatcher.get_current_device"
    try:
        original = resolve(path)
    except InternalMissing:
        raise RuntimeError(
            "this numba-cuda version cannot compile device functions offline"
        ) from None
    assign(path, lambda: types.SimpleNamespace(compute_capability=cc))
    try:
        yield
    finally:
        assign(path, original)


def _cuda_layout() -> str:
    """The layout the cuda backend gives new envs (its default: no GPU is asked)."""
    from .cuda import CUDABackend

    return CUDABackend.LAYOUT


def compile_ptx(
    spec: GameSpec, params=None, cc: tuple[int, int] = (9, 0), layout: str | None = None
) -> dict[str, str]:
    """PTX of a game's step and reset kernels for compute capability ``cc``, with no GPU.

    Args:
        spec: the game.
        params: its params (default ``spec.make_params()``); argument types are those of the
            buffers ``KernelEnv`` allocates, so one PTX serves every value of the params.
        cc: compute capability, e.g. ``(9, 0)``.
        layout: the buffers' layout (``env.LAYOUTS``; default: the cuda backend's).

    Returns:
        ``{"step_kernel": ptx, "reset_kernel": ptx}``.
    """
    import numba

    cuda = numba_cuda()

    _require_compiler()
    params = spec.make_params() if params is None else params
    # the same buffers, argument order and layout as on the GPU (two envs: with one an
    # env-minor array is contiguous both ways and would type as C), on the host
    host = KernelEnv(spec, 2, "python", params, layout=layout or _cuda_layout())
    module = kernel_module(spec, cuda, f"ptx cc={cc}")
    out = {}
    launches = {"step_kernel": host.step_args(host.arrays["obs"]), "reset_kernel": host.reset_args}
    with _target_cc(cc):
        for name, args in launches.items():
            signature = tuple(numba.typeof(a) for a in args)
            out[name] = cuda.compile_ptx(getattr(module, name), signature, cc=cc)[0]
    return out


def compile_column_ptx(kernel: ColumnKernel, args: tuple, cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of a column kernel's CUDA launcher for compute capability ``cc``, with no GPU.

    Args:
        kernel: the column kernel, e.g. ``gae.GAE``.
        args: example arguments (host arrays and scalars) whose Numba types are the signature,
            e.g. ``gae.example_args()``.
        cc: compute capability, e.g. ``(9, 0)``.

    Returns:
        The PTX text (one ``.entry``).
    """
    import numba

    cuda = numba_cuda()

    _require_compiler()
    module = kernel.source_module("cuda", tag=f"ptx cc={cc}")
    launch_args = (int(kernel.columns(args)), *args)  # the launcher takes the column count first
    signature = tuple(numba.typeof(a) for a in launch_args)
    with _target_cc(cc):
        return cuda.compile_ptx(module.column_kernel, signature, cc=cc)[0]


def compile_copy_rows_ptx(dtype=np.uint8, cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of ``cuda.copy_rows_kernel`` (env-minor observations into rows) for ``dtype``."""
    import numba

    cuda = numba_cuda()

    _require_compiler()
    module = copy_rows_module(dtype)
    stage = np.zeros((5, 3), dtype)
    signature = (numba.typeof(stage), numba.typeof(stage.T.copy()))
    return cuda.compile_ptx(module.copy_rows_kernel, signature, cc=cc)[0]


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


def report(specs, cc: tuple[int, int] = (9, 0), layout: str | None = None) -> list[str]:
    """One line per kernel of ``specs`` and per learner kernel (GAE, Q(lambda)): PTX size,
    and registers and spill stores where ``ptxas`` is found.

    Args:
        specs: the games (``GameSpec``) to compile.
        cc: compute capability, e.g. ``(9, 0)``.
        layout: the games' buffer layout (``env.LAYOUTS``; default: the cuda backend's).

    Returns:
        Lines such as ``snake      step_kernel   sm_90: PTX 51,234 chars, 40 registers, 0 B
        spill stores``.
    """
    kernels = []
    for spec in specs:
        compiled = compile_ptx(spec, cc=cc, layout=layout)
        kernels += [(spec.name, name, ptx) for name, ptx in compiled.items()]
    for name, module, kernel in (("gae", gae, gae.GAE), ("qlambda", qlambda, qlambda.QLAMBDA)):
        compiled = compile_column_ptx(kernel, module.example_args(), cc)
        kernels.append((name, "column_kernel", compiled))
    dtypes = sorted({np.dtype(spec.obs_dtype).name for spec in specs})
    for dtype in dtypes:
        kernels.append((f"rows_{dtype}", "copy_rows", compile_copy_rows_ptx(dtype, cc)))
    has_ptxas = find_ptxas() is not None
    lines = []
    for name, kernel, ptx in kernels:
        line = f"{name:10s} {kernel:13s} sm_{cc[0]}{cc[1]}: PTX {len(ptx):,} chars"
        if has_ptxas:
            info = ptxas_info(ptx, cc)
            regs = max(int(r) for r in re.findall(r"Used (\d+) registers", info))
            spills = sum(int(s) for s in re.findall(r"(\d+) bytes spill stores", info))
            line += f", {regs} registers, {spills} B spill stores"
        lines.append(line)
    return lines

"""GPU probes and conversions, shared by the cuda runtime, learner kernels and the device rule.

A leaf: it imports only the standard library and NumPy at load time, and numba-cuda lazily, so
asking whether a GPU is usable never compiles or allocates anything.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .internals import resolve

INSTALL_HINT = "install the GPU extra with: pip install 'fasttrain[cuda]'"


# Warnings a GPU run triggers that say nothing a user can act on, silenced by their message:
# torch's note that a capturable optimizer steps outside a capture (the eager warm-up before a
# CUDA graph's capture does, by design), and numba-cuda's low-occupancy note for small grids (a
# small env count, the tiled copies of a few rows)
KNOWN_NOISE = (
    r"This instance was constructed with capturable=True",
    r"Grid size \d+ will likely result in GPU under-utilization",
)


def quiet_known_gpu_noise() -> None:
    """Ignore the ``KNOWN_NOISE`` warnings (by message only: any other warning still shows)."""
    import warnings

    for message in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message)


def numba_cuda():
    """numba-cuda's ``numba.cuda`` module: fasttrain's one import of it (every other module
    asks here), so its successor, numba-cuda-mlir, would be one change away. Imported at the
    first call: a CPU run never loads it."""
    from numba import cuda

    return cuda


# Where a kernel's working memory puts one environment's values (docs/kernels.md#memory-layout):
#   env-major  every array in rows, an environment's values side by side (the host backends)
#   obs-minor  the observations a kernel writes env-minor (a stage, copied into the env-major
#              rows the learner reads by one coalesced copy after each step), the state in rows
#   env-minor  the game's state arrays env-minor too
LAYOUTS = ("env-major", "obs-minor", "env-minor")


# FASTTRAIN_CUDA_LAYOUT: the cuda backend's layout for a whole process, to go back to the layout
# measured on the H200 (env-major) where the default (obs-minor) misbehaves
CUDA_LAYOUT = "FASTTRAIN_CUDA_LAYOUT"


def cuda_layout() -> str | None:
    """The layout ``FASTTRAIN_CUDA_LAYOUT`` asks the cuda backend for, or None (unset or
    empty: the backend's default); a ValueError in one line for anything else."""
    text = os.environ.get(CUDA_LAYOUT, "").strip()
    if not text:
        return None
    if text not in LAYOUTS:
        raise ValueError(
            f"{CUDA_LAYOUT}={text}: not a layout; {', '.join(LAYOUTS)}, or unset for the cuda "
            "backend's default (obs-minor)"
        )
    return text


def backends_line() -> str:
    """``backends on this machine: python, cpu, cuda``, or why not cuda (``cuda_problem``):
    what ``fasttrain games`` and ``fasttrain bench`` print."""
    problem = cuda_problem()
    if problem is None:
        cuda = ", cuda (the CUDA simulator)" if simulator() else ", cuda"
        return f"backends on this machine: python, cpu{cuda}"
    return f"backends on this machine: python, cpu; not cuda: {problem}"


def simulator() -> bool:
    """True when Numba's CUDA simulator is switched on (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def cuda_problem() -> str | None:
    """None when the cuda backend can run here (a GPU, or the simulator), else a one-line reason."""
    try:
        cuda = numba_cuda()
    except ImportError:
        return f"numba-cuda is not installed; {INSTALL_HINT}"
    stale = numpy_too_new_for_numba_cuda()
    if stale:
        return stale
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


@functools.cache
def numpy_too_new_for_numba_cuda() -> str | None:
    """One line when this numba-cuda calls a NumPy function this NumPy no longer has (numpy 2.5
    removed ``np.row_stack``, which numba-cuda 0.30 still calls at every launch), else None."""
    if hasattr(np, "row_stack"):
        return None
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("numba_cuda") or importlib.util.find_spec("numba.cuda")
    folders = spec.submodule_search_locations if spec is not None else None
    for folder in folders or ():
        for root, _, files in os.walk(folder):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(root, name), encoding="utf-8", errors="ignore") as f:
                        if "np.row_stack" in f.read():
                            return _numpy_hint(importlib.metadata)
    return None


def _numpy_hint(metadata) -> str:
    try:
        version = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        version = "here"
    return (
        f"numba-cuda {version} calls np.row_stack, which numpy {np.__version__} removed; "
        "pip install 'numpy<2.5' (or a numba-cuda that no longer calls it)"
    )


def device_args(args) -> tuple:
    """Kernel arguments with every array converted once to a Numba device array.

    CuPy arrays and torch CUDA tensors (anything with ``__cuda_array_interface__``) become
    ``DeviceNDArray`` views without a stream synchronisation; under the simulator NumPy arrays
    are wrapped as its device arrays, since it would otherwise copy each one in and back out
    around a launch and aliased views (``obs``, ``obs_flat``, ``obs_words``) would overwrite
    each other. Scalars pass through.

    Args:
        args: kernel arguments: arrays (CuPy, torch CUDA, Numba device; NumPy under the
            simulator) and scalars.

    Returns:
        The same arguments, arrays as Numba device arrays sharing the callers' memory.
    """
    if simulator():
        fake_cuda_array = resolve("numba.cuda.simulator.cudadrv.devicearray.FakeCUDAArray")

        def convert(a):
            return fake_cuda_array(a) if isinstance(a, np.ndarray) else a

    else:
        cuda = numba_cuda()

        is_cuda_ndarray = resolve("numba.cuda.cudadrv.devicearray.is_cuda_ndarray")

        def convert(a):
            if cuda.is_cuda_array(a) and not is_cuda_ndarray(a):
                return cuda.as_cuda_array(a, sync=False)
            return a

    return tuple(convert(a) for a in args)


_STREAMS: dict[int, object] = {}  # raw cudaStream_t -> Numba stream, made once per pointer


def numba_stream(pointer: int):
    """A Numba stream for a raw ``cudaStream_t`` (0, the legacy default stream, stays 0)."""
    if pointer == 0 or simulator():
        return 0
    if pointer not in _STREAMS:
        cuda = numba_cuda()

        _STREAMS[pointer] = cuda.external_stream(pointer)
    return _STREAMS[pointer]

"""The environment variables the ``fasttrain`` command reads, checked as it starts: a bad value
is one line, ``VAR=value: what is wrong; what is valid``, never a traceback from deep inside a
command (or a warning that prints one, as Numba's reading of ``NUMBA_NUM_THREADS`` does).

``check_at_start`` runs in ``fasttrain.cli.entry`` before Numba is imported (Numba reads
``NUMBA_NUM_THREADS`` as it imports); torchrun's variables are read by
``fasttrain.learners.ranks``, with ``whole_number`` here. Imports nothing of fasttrain's but its
errors at load.
"""

from __future__ import annotations

import os

from fasttrain.errors import ConfigError

NUMBA_NUM_THREADS = "NUMBA_NUM_THREADS"
# fasttrain.kernels.backends.CHECKED_KERNELS, named here so that a command that never compiles
# a kernel imports Numba only where the variable is set (a test checks the two agree)
CHECKED_KERNELS = "FASTTRAIN_CHECKED_KERNELS"


def whole_number(name: str, low: int, high: int | None, valid: str) -> int | None:
    """The whole number in environment variable ``name`` from ``low`` to ``high`` (None: no
    upper bound); None when it is unset. Anything else, an empty value included, is a
    ConfigError in one line ending in ``valid``, what the variable takes."""
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        problem = "not a whole number"
    else:
        if value >= low and (high is None or value <= high):
            return value
        problem = f"below {low}" if value < low else f"above {high}"
    raise ConfigError(f"{name}={text}: {problem}; {valid}")


def numba_threads() -> int | None:
    """``NUMBA_NUM_THREADS``, the size of Numba's thread pool: 1 or more (Numba itself warns
    with a traceback and goes on for a value that is not a number, and fails on its first
    parallel launch, or as it imports, for one below 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return whole_number(
        NUMBA_NUM_THREADS,
        1,
        None,
        f"the threads of Numba's pool, 1 or more (this machine has {cores or 1} cores), or "
        "unset for one per core",
    )


# FASTTRAIN_CPU=avx2: measure an AVX2 laptop's figures on a machine with AVX-512 or AMX. Set
# before torch loads (``fasttrain/__init__.py`` applies it), it stops torch's own kernels (ATen),
# oneDNN and MKL at AVX2, and fasttrain's choices see a CPU without bf16 (``device.cpu_class``).
CPU = "FASTTRAIN_CPU"
EMULATED = {  # class -> the variables that stop torch's libraries there (a user's own win)
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}


def emulated_cpu() -> str | None:
    """The CPU class ``FASTTRAIN_CPU`` asks to emulate, or None (unset or empty); one line for
    a class fasttrain cannot emulate."""
    text = os.environ.get(CPU, "").strip()
    if not text:
        return None
    if text.lower() not in EMULATED:
        raise ConfigError(
            f"{CPU}={text}: not a CPU class fasttrain emulates; {', '.join(EMULATED)}, or unset "
            "for this machine's own"
        )
    return text.lower()


def emulate_cpu() -> None:
    """Set torch's libraries' instruction-set limits for ``FASTTRAIN_CPU`` (before torch
    loads); a bad value is left for ``check_at_start`` to refuse."""
    try:
        cpu = emulated_cpu()
    except ConfigError:
        return
    for name, value in EMULATED.get(cpu, {}).items():
        os.environ.setdefault(name, value)


# fasttrain.kernels.gpu.CUDA_LAYOUT, the cuda backend's layout of the kernels' working memory,
# named here so that a command that never makes an env imports Numba only where it is set
CUDA_LAYOUT = "FASTTRAIN_CUDA_LAYOUT"


def check_at_start() -> None:
    """Every variable any command reads, before the command (and Numba) starts: one
    ConfigError line for the first bad one. torchrun's variables are checked by ``fasttrain
    run``, the one command that reads them."""
    numba_threads()
    emulated_cpu()
    try:  # the kernel layer's variables: its readers import Numba, so only where one is set
        if CUDA_LAYOUT in os.environ:
            from fasttrain.kernels.gpu import cuda_layout

            cuda_layout()
        if CHECKED_KERNELS in os.environ:
            from fasttrain.kernels.backends import checked_kernels

            checked_kernels()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

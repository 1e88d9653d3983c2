"""Every private torch and Numba name fasttrain relies on, in one list, and the one way to reach
them.

A torch or Numba upgrade may move or drop any of these without notice; the code reaches each
one only through ``resolve`` (or ``name``, for an option or a logger given by name), which
refuses a path missing from ``INTERNALS``, so this list is complete by construction.
``tests/fasttrain/kernels/test_internals.py`` resolves every entry against the installed
versions and fails naming the one that broke.

The module is plain data and imports nothing at import time (the kernel layer imports no torch):
``resolve`` imports the module a path names only when it is called.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Internal:
    """One private name: where it is, why fasttrain uses it and how a test finds it."""

    path: str
    """dotted path: a module, then attributes (``torch.fx._symbolic_trace._Patcher``)"""
    why: str
    """what fasttrain does with it, and where"""
    on_instance: bool = False
    """an attribute of the instances of the class the path names up to its last part
    (``torch.nn.Module._parameters``), not of the class itself"""
    extra: str = ""
    """the optional package the entry belongs to (``numba.cuda``); empty: a core dependency"""


INTERNALS: tuple[Internal, ...] = (
    # torch: compile machinery (fasttrain/learners/compile.py)
    Internal(
        "torch._dynamo.config.recompile_limit",
        "raised to RECOMPILE_LIMIT: every trainer in one process compiles its step anew",
    ),
    Internal(
        "torch._dynamo.config.cache_size_limit",
        "recompile_limit's name before torch 2.6, raised the same way",
    ),
    Internal(
        "torch._dynamo.config.accumulated_recompile_limit",
        "raised with recompile_limit so many trainers in one process keep compiling",
    ),
    Internal(
        "torch._inductor.config.cpp.simdlen",
        "inductor's CPU vector width: 256 (AVX2 code) where its AVX-512 code corrupts the heap",
    ),
    Internal(
        "torch._inductor.config.cpp.use_decompose_tanh",
        "inductor's fast CPU tanh (Sleef's exact one is ~4x slower; docs/performance.md)",
    ),
    Internal(
        "torch._inductor.runtime.cache_dir_utils.default_cache_dir",
        "torch's compile cache folder where none is set: fasttrain's replaces it, not the user's",
    ),
    Internal(
        "torch._dynamo.variables.ctx_manager",
        "logger name: its profiler-marker notes are filtered out of a run's output",
    ),
    Internal(
        "torch._dynamo.variables.torch",
        "logger name: its profiler-marker notes are filtered out of a run's output",
    ),
    Internal(
        "torch._dynamo.is_dynamo_supported",
        "whether this torch compiles on this Python (fasttrain/device.py)",
    ),
    Internal(
        "torch.fx._symbolic_trace._Patcher.patch",
        "wrapped so fx's tracing patches act only in the background compile's thread",
    ),
    Internal(
        "torch.fx._symbolic_trace._Patcher.patch_method",
        "wrapped so fx's tracing patches act only in the background compile's thread",
    ),
    Internal(
        "torch.nn.Module._parameters",
        "adopt_compiled puts the parameters a background compile ran on into the real module",
        on_instance=True,
    ),
    # torch: fused tensor lists
    Internal(
        "torch._foreach_copy_",
        "one kernel for the masked step's backups (learners/optim.py) and DQN's target copy",
    ),
    Internal("torch._foreach_lerp_", "one kernel for DQN's soft target update (dqn.tau)"),
    # Numba, CPU backend (fasttrain/kernels/backends.py)
    Internal(
        "numba.core.ir_utils.alias_analysis_extensions",
        "keeps writes through arrays taken out of a tuple in prange loops (numba#5872)",
    ),
    Internal("numba.core.ir.Assign", "the IR statement the alias extension is registered for"),
    Internal("numba.core.ir.Var", "an IR value the alias extension counts as an alias"),
    Internal("numba.core.ir.Expr", "an IR value the alias extension counts as an alias"),
    Internal(
        "numba.core.cpu.CPUTargetOptions._nrt",
        "njit option _nrt=False: no reference counting in launchers (Snake ran at half speed)",
    ),
    # Numba: compile notices (fasttrain/kernels/compiling.py)
    Internal("numba.core.event.Listener", "hears numba:compile, which fires only on a compile"),
    Internal("numba.core.event.install_listener", "installs that listener around the compile"),
    # numba-cuda (fasttrain/kernels/gpu.py, fasttrain/kernels/ptx.py)
    Internal(
        "numba.cuda.cudadrv.devicearray.is_cuda_ndarray",
        "a Numba device array passes through; other CUDA arrays are wrapped without a sync",
        extra="numba.cuda",
    ),
    Internal(
        "numba.cuda.simulator.cudadrv.devicearray.FakeCUDAArray",
        "NumPy arrays under the simulator, wrapped so aliased views are not copied apart",
        extra="numba.cuda",
    ),
    Internal(
        "numba.cuda.dispatcher.get_current_device",
        "swapped for a compute capability while PTX compiles offline, with no GPU",
        extra="numba.cuda",
    ),
)

_LISTED = {internal.path: internal for internal in INTERNALS}


class InternalMissing(ImportError):
    """A listed internal that the installed torch or Numba no longer has."""


def listed(path: str) -> Internal:
    """The entry of ``path``; a path not in ``INTERNALS`` is a bug of the caller."""
    try:
        return _LISTED[path]
    except KeyError:
        raise KeyError(f"{path} is not in fasttrain.kernels.internals.INTERNALS; add it") from None


def name(path: str) -> str:
    """The last part of a listed ``path``: an option's keyword or a logger's name's end."""
    listed(path)
    return path.rpartition(".")[2]


def resolve(path: str, instance=None):
    """The object at the listed dotted ``path``, importing its module now; with ``instance``,
    that instance's attribute (an ``on_instance`` entry). Raises ``InternalMissing`` (an
    ``ImportError``) naming ``path`` where the installed package lacks it."""
    internal = listed(path)
    try:
        if internal.on_instance:
            if instance is None:
                raise TypeError(f"{path} is an attribute of instances: pass one")
            return getattr(instance, name(path))
        return _walk(path)
    except (ImportError, AttributeError):
        raise InternalMissing(f"{path} is missing from the installed version") from None


def assign(path: str, value) -> None:
    """Set the listed setting ``path`` (a config attribute, a module's function) to ``value``;
    raises ``InternalMissing`` where it does not exist."""
    resolve(path)
    owner, _, attribute = path.rpartition(".")
    setattr(_walk(owner), attribute, value)


def _walk(dotted: str):
    """Import the longest module prefix of ``dotted``, then take the attributes after it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
            break
        except ImportError:
            if end == 1:
                raise
    for attribute in parts[end:]:
        obj = getattr(obj, attribute)
    return obj

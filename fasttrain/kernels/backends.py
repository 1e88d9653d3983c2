"""Backends: where arrays live and how a game's scalar functions are compiled and launched.

``python`` runs the game's functions uncompiled (the reference), ``cpu`` compiles them with
``numba.njit`` and launches one ``prange`` over environments, ``cuda`` (see ``cuda.py``) compiles
them with numba-cuda, one thread per environment. Each backend compiles a game once per process.
``cuda.py`` is imported only when the cuda backend is asked for; it never imports this module.
"""

from __future__ import annotations

import contextlib

import numpy as np

from . import internals
from .build import Launchers, game_functions, load_launchers
from .compiling import compile_now
from .device import cuda_problem, simulator
from .spec import GameSpec

BACKENDS = ("python", "cpu", "cuda")


class PythonBackend:
    """The uncompiled reference: the same generated launchers run as plain Python."""

    name = "python"
    xp = np
    device = "cpu"
    validates_in_kernel = True  # step_all checks every action before it changes anything

    def __init__(self):
        self._cache: dict[GameSpec, Launchers] = {}  # by spec: a replaced game recompiles

    def compile(self, spec: GameSpec) -> Launchers:
        if spec not in self._cache:
            module = load_launchers(
                spec,
                {**game_functions(spec, lambda fn: fn), "prange": range},
                "python",
            )

            def step(*args):
                with np.errstate(over="ignore"):
                    return module.step_all(*args)

            self._cache[spec] = Launchers(step, module.reset_all)
        return self._cache[spec]

    def prepare_args(self, args: tuple) -> tuple:
        """Launch arguments in the form ``launch_*`` takes (host arrays: as they are)."""
        return args

    def warm_up(self, spec: GameSpec, launchers: Launchers, step_args, reset_args) -> None:
        """Compile the launchers for these arguments now (nothing to compile here)."""

    def launch_step(self, launchers: Launchers, args: tuple, num_envs: int, stream: int = 0):
        """Step every env; returns -1 or the index of the first out-of-range action."""
        return launchers.step(*args)

    def launch_reset(self, launchers: Launchers, args: tuple, num_envs: int, stream: int = 0):
        launchers.reset(*args)

    def on_stream(self, stream: int):
        """Context for array work ordered on ``stream`` (host backends: nothing to order)."""
        return contextlib.nullcontext()

    def to_host(self, array):
        return array

    def synchronize(self):
        pass


def keep_writes_through_tuples() -> None:
    """Make Numba's parallel loops keep writes into arrays taken out of a tuple.

    A game writes through its objects (``s.body[i, k] = cell``: an array taken out of a
    namedtuple). Numba's dead-code elimination inside ``prange`` loops does not know that such an
    array is the caller's, and drops the write (numba#5872, open in 0.68). Its alias analysis
    has an extension hook per IR statement type; this one counts every array a function takes
    out of a tuple, views or copies (``out = io.obs_flat[i, a]``, a helper's parameter) as an
    alias of the arguments, whatever order the analysis visits the blocks in. It only ever
    keeps code (an array a function allocates still counts as its own). Idempotent.
    """
    import numba

    extensions = internals.resolve("numba.core.ir_utils.alias_analysis_extensions")
    assign = internals.resolve("numba.core.ir.Assign")
    var, expr = internals.resolve("numba.core.ir.Var"), internals.resolve("numba.core.ir.Expr")
    previous = extensions.get(assign)
    if getattr(previous, "keeps_tuple_writes", False):
        return

    def extension(instr, args, typemap, func_ir, alias_map, arg_aliases):
        if previous is not None:
            previous(instr, args, typemap, func_ir, alias_map, arg_aliases)
        value = instr.value
        taken = isinstance(value, var) or (
            isinstance(value, expr) and value.op in ("getattr", "static_getitem", "getitem")
        )
        if (
            taken
            and isinstance(arg_aliases, set)  # parfor lowering passes a dict, to find no aliases
            and typemap
            and isinstance(typemap.get(instr.target.name), numba.types.Array)
        ):
            arg_aliases.add(instr.target.name)

    extension.keeps_tuple_writes = True
    extensions[assign] = extension


class CPUBackend(PythonBackend):
    """Numba on the CPU: ``njit`` game functions inside one ``prange`` launcher per call."""

    name = "cpu"
    # inline="always": without it each env pays a call passing ~25 array structs (2.5x slower).
    # _nrt=False (a private option: fasttrain.kernels.internals): no reference counting (games
    # never allocate); with it every array in the objects was counted at every step, and Snake
    # ran at half speed (one thread: 6.9M against 12.8M env-steps/s with one argument per array,
    # 20M without counting)
    GAME_OPTIONS = dict(cache=False, error_model="numpy", inline="always")
    LAUNCH_OPTIONS = {
        "parallel": True,
        "cache": True,
        "error_model": "numpy",
        "nogil": True,
        internals.name("numba.core.cpu.CPUTargetOptions._nrt"): False,
    }

    def compile(self, spec: GameSpec) -> Launchers:
        if spec not in self._cache:
            import numba

            keep_writes_through_tuples()

            def jit(fn):
                return numba.njit(fn, **self.GAME_OPTIONS)

            module = load_launchers(
                spec,
                {**game_functions(spec, jit), "prange": numba.prange},
                f"cpu {self.GAME_OPTIONS} {self.LAUNCH_OPTIONS}",
            )
            step = numba.njit(module.step_all, **self.LAUNCH_OPTIONS)
            reset = numba.njit(module.reset_all, **self.LAUNCH_OPTIONS)
            self._cache[spec] = Launchers(step, reset, (step, reset))
        return self._cache[spec]

    def warm_up(self, spec: GameSpec, launchers: Launchers, step_args, reset_args) -> None:
        """Compile step and reset for these arguments' types now, saying so on a cold cache
        (``compiling.compile_now``), rather than silently inside the first launches."""
        step, reset = launchers.dispatchers
        compile_now(spec.name, self.name, [(reset, reset_args), (step, step_args)])


_INSTANCES: dict[str, object] = {}


def get_backend(name: str):
    """The backend object for ``name`` (``python``, ``cpu``, ``cuda``), created once."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)} or 'auto'")
    if name not in _INSTANCES:
        if name == "cuda":
            from .cuda import CUDABackend

            _INSTANCES[name] = CUDABackend()
        else:
            _INSTANCES[name] = {"python": PythonBackend, "cpu": CPUBackend}[name]()
    return _INSTANCES[name]


def cuda_available() -> bool:
    """True when a real CUDA GPU and the ``cuda`` extra (numba-cuda, CuPy) are usable."""
    return not simulator() and cuda_problem() is None


def resolve_backend(name: str) -> str:
    """Map ``auto`` to ``cuda`` when a GPU is usable, else ``cpu``."""
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)} or 'auto'")
    return name

"""Backends: where arrays live and how a game's scalar functions are compiled and launched.

``python`` runs the game's functions uncompiled (the reference), ``cpu`` compiles them with
``numba.njit`` and launches one ``prange`` over environments, ``cuda`` (see ``cuda.py``) compiles
them with numba-cuda, one thread per environment. Each backend compiles a game once per process.
``cuda.py`` is imported only when the cuda backend is asked for; it never imports this module.

Checked kernels: with ``FASTTRAIN_CHECKED_KERNELS=1`` in the environment, the ``cpu`` backend
compiles a game's functions and launchers with Numba's ``boundscheck=True``, so that an index
outside an array raises ``OutOfBoundsError`` (naming the game) instead of reading or writing
memory it does not own: for tests and fuzzing. Its launchers step the environments one after
another (in a parallel loop Numba loses an error raised on a worker thread) and have their own
cached files (the options are part of the launcher file's name; Numba's cache key does not
include ``boundscheck``). ``0`` or unset: unchecked and parallel, the normal speed.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re

import numpy as np

from . import internals
from .build import Launchers, game_functions, load_launchers
from .compiling import compile_now
from .gpu import cuda_problem, simulator
from .spec import GameSpec, call_graph

BACKENDS = ("python", "cpu", "cuda")
CHECKED_KERNELS = "FASTTRAIN_CHECKED_KERNELS"


def checked_kernels() -> bool:
    """True when ``FASTTRAIN_CHECKED_KERNELS=1``: compile bounds-checked cpu kernels."""
    value = os.environ.get(CHECKED_KERNELS, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(
            f"{CHECKED_KERNELS}={os.environ[CHECKED_KERNELS]}: neither 0 nor 1; 1 compiles "
            "bounds-checked cpu kernels (tests, fuzzing), 0 or unset the usual ones"
        )
    return value == "1"


class OutOfBoundsError(RuntimeError):
    """A bounds-checked kernel (``FASTTRAIN_CHECKED_KERNELS=1``) indexed outside an array:
    unchecked, it would have read or written memory the arrays do not own."""


class GameCompileError(ValueError):
    """Numba could not compile a game's function; one line naming the rule, the function and
    its line, Numba's own error chained to it (``__cause__``)."""


class PythonBackend:
    """The uncompiled reference: the same generated launchers run as plain Python."""

    name = "python"
    xp = np
    device = "cpu"
    validates_in_kernel = True  # step_all checks every action before it changes anything
    # env.LAYOUTS: a thread (cpu) steps a run of whole envs, so each env's values side by side
    layout = "env-major"

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

    def copy_rows(self, stage, out, stream: int = 0) -> None:
        """``out[r, k] = stage[k, r]``: env-minor ``(S, R)`` observations into ``(R, S)`` rows
        (a ``KernelEnv`` made with another ``layout``; the host backends default to env-major)."""
        out[...] = stage.T

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

    def options(self, checked: bool) -> tuple[dict, dict]:
        """Numba options of the game's functions and of the launchers; ``checked`` adds
        ``boundscheck=True`` (and so changes the tag that names the launcher file: Numba's
        cache key does not include the option, the file name does)."""
        if not checked:
            return self.GAME_OPTIONS, self.LAUNCH_OPTIONS
        # serial: inside a parallel loop, a bounds error raised on a worker thread is lost
        # (Numba sets it in that thread's state; the launcher returns as if nothing happened)
        launch = {**self.LAUNCH_OPTIONS, "boundscheck": True, "parallel": False}
        return {**self.GAME_OPTIONS, "boundscheck": True}, launch

    def compile(self, spec: GameSpec) -> Launchers:
        checked = checked_kernels()
        if (spec, checked) not in self._cache:
            import numba

            keep_writes_through_tuples()
            game_options, launch_options = self.options(checked)

            def jit(fn):
                return numba.njit(fn, **game_options)

            module = load_launchers(
                spec,
                {**game_functions(spec, jit), "prange": numba.prange},
                f"cpu {game_options} {launch_options}",
            )
            step = numba.njit(module.step_all, **launch_options)
            reset = numba.njit(module.reset_all, **launch_options)
            if checked:
                launchers = Launchers(
                    out_of_bounds_named(step, spec.name, "step"),
                    out_of_bounds_named(reset, spec.name, "reset"),
                    (step, reset),
                )
            else:
                launchers = Launchers(step, reset, (step, reset))
            self._cache[spec, checked] = launchers
        return self._cache[spec, checked]

    def warm_up(self, spec: GameSpec, launchers: Launchers, step_args, reset_args) -> None:
        """Compile step and reset for these arguments' types now, saying so on a cold cache
        (``compiling.compile_now``), rather than silently inside the first launches. Numba's
        errors become one ``GameCompileError`` line (``compile_error``)."""
        import numba

        step, reset = launchers.dispatchers
        try:
            compile_now(spec.name, self.name, [(reset, reset_args), (step, step_args)])
        except numba.NumbaError as exc:
            raise compile_error(spec, exc) from exc


def out_of_bounds_named(dispatcher, game: str, what: str):
    """``dispatcher`` with a bounds check's IndexError turned into ``OutOfBoundsError``."""

    def launch(*args):
        try:
            return dispatcher(*args)
        except IndexError as exc:
            raise OutOfBoundsError(
                f"game {game!r}: the {what} indexed an array out of bounds ({exc}; caught by "
                f"{CHECKED_KERNELS}=1: unchecked, it would touch memory outside the arrays); "
                "the environments' state is no longer valid"
            ) from exc

    return launch


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Numba colours its messages
_PLACES = re.compile(r'File "([^"]+)", line (\d+)|at (\S+?\.py) \((\d+)\)')  # its two forms
# what Numba says when code allocates: without reference counting (LAUNCH_OPTIONS) it cannot
_ALLOCATES = re.compile(r"NRT required|reflected list|built-in function (empty|zeros)\b")
_NOISE = ("Failed in ", "During: ", "raised from ", "File ")


def compile_error(spec: GameSpec, exc: BaseException) -> GameCompileError:
    """Numba's error compiling ``spec`` as one line: the game, the function and its file:line
    where Numba names one of the game's lines, the rule broken, Numba's first message line."""
    text = _ANSI.sub("", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = next((line for line in lines if not line.startswith(_NOISE)), type(exc).__name__)
    first = first[:200].rstrip(":")  # "No implementation of function ... found for signature:"
    places = [(m[1] or m[3], int(m[2] or m[4])) for m in _PLACES.finditer(text)]
    loc = getattr(exc, "loc", None)
    if getattr(loc, "filename", None) and getattr(loc, "line", None):
        places.insert(0, (loc.filename, loc.line))
    where = next(filter(None, (_game_line(spec, f, n) for f, n in places)), "")
    if _ALLOCATES.search(text):
        rule = (
            "may not allocate (array arithmetic, arrays, lists, strings): write into state arrays"
        )
    else:
        rule = "uses what Numba cannot compile in a game function"
    return GameCompileError(
        f"game {spec.name!r}: {where or 'one of its functions'} {rule}: {first}"
    )


def _game_line(spec: GameSpec, filename: str, line: int) -> str:
    """``"fn (file:line)"`` when ``line`` of ``filename`` lies in one of ``spec``'s functions."""
    path = os.path.abspath(filename)
    for fn in [f for root in spec.functions() for f in call_graph(root)]:
        try:
            source, start = inspect.getsourcelines(fn)
            found = os.path.abspath(inspect.getsourcefile(fn) or "")
        except (OSError, TypeError):
            continue
        if found == path and start <= line < start + len(source):
            return f"{fn.__name__} ({found}:{line})"
    return ""


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

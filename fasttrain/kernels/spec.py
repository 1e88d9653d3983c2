"""What a game declares so that the kernels can allocate, compile and launch it."""

from __future__ import annotations

import dataclasses
import dis
import inspect
import keyword
import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# A game's functions take three objects after the env index ``i`` (and the agent index ``a``):
# ``io`` the I/O buffers the runtime owns, ``s`` the state (the game's ``state`` arrays and
# ``rng``, the env's random stream) and ``p`` the params (``reset_one(i, io, s, p)``). The
# kernels build them from the spec; helpers take the same objects.
OBJECTS = ("io", "s", "p")
# The buffers in ``io``. Shapes are per row; the runtime prepends num_envs (single-agent games)
# or (num_envs, num_agents) (agent games, see GameSpec). ``obs_flat`` is the same memory as
# ``obs`` viewed as (..., prod(obs_shape)), for division-free indexing.
IO_BUFFERS = ("obs", "obs_flat", "actions", "rewards", "terminated", "truncated", "score")
# ``s.rng``: one xorshift64 word per environment (``rng.py``), before the game's state arrays
RNG = "rng"
# launcher arguments the runtime passes besides the game's state and params (build.py):
# a state array or param may not take one of these names
RUNTIME_ARGS = (
    *IO_BUFFERS,
    *(RNG, "num_actions", "repeat", "obs_words", "final_obs", "final_obs_flat"),
    *("final_obs_words", "ep_return", "ep_length", "done_return", "done_length", "done_score"),
    "done_count",
)
# the generated launchers' own variables and globals, which the game's names must not shadow
LAUNCHER_NAMES = (
    *("i", "a", "j", "k", "n", "r", "io", "s", "p", "final_io", "num_agents", "earlier"),
    *("ended", "whole", "IO", "State", "Params", "namedtuple", "prange", "cuda", "step_one"),
    *("reset_one", "observe", "reset_agent"),
)


FLOAT32_MAX = float(np.finfo(np.float32).max)  # rewards, scores and physics are float32


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float64
        return False


def _is_count(n) -> bool:
    """``n`` is an int >= 1 (NumPy's included, a bool not)."""
    return not isinstance(n, bool) and isinstance(n, (int, np.integer)) and n >= 1


def call_graph(fn: types.FunctionType) -> list[types.FunctionType]:
    """``fn`` and every plain Python function it reaches through its globals, in visit order."""
    seen: dict[types.FunctionType, None] = {}

    def visit(f):
        if f in seen:
            return
        seen[f] = None
        for name in sorted(global_names(f.__code__)):  # sorted: str hashing is randomised
            value = f.__globals__.get(name)
            if isinstance(value, types.FunctionType):
                visit(value)

    visit(fn)
    return list(seen)


def global_names(code: types.CodeType) -> set[str]:
    """Global names ``code`` reads, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def _object_attributes(fn) -> list[tuple[str, str]]:
    """``(object, attribute)`` for every ``io.x``, ``s.x`` and ``p.x`` that ``fn`` reads or
    writes, where ``io``, ``s`` and ``p`` are its parameters of those names."""
    code = fn.__code__
    objects = set(code.co_varnames[: code.co_argcount]) & set(OBJECTS)
    found = []
    loaded = None  # the object the previous instruction loaded, if any
    for instruction in dis.get_instructions(code):
        if loaded and instruction.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"):
            found.append((loaded, instruction.argval))
        loaded = None
        if instruction.opname.startswith("LOAD_FAST"):  # 3.13 fuses two: LOAD_FAST_LOAD_FAST
            name = instruction.argval
            name = name[-1] if isinstance(name, tuple) else name
            loaded = name if name in objects else None
    return found


# A game's name names its launcher files, its config sections (``[game.<name>]``, ``--set
# game.<name>.x``) and its gym id: a letter, then letters, digits, ``_`` or ``-`` (TOML's bare
# keys, and a file name on every platform)
GAME_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# NumPy functions that allocate, which a game's compiled functions may not call
ALLOCATORS = frozenset(
    ("zeros", "empty", "ones", "full", "array", "arange", "linspace", "concatenate", "stack")
    + ("zeros_like", "empty_like", "ones_like", "full_like", "copy", "tile", "repeat")
)
# bytecode that builds a container, which a compiled game function cannot have (no allocation)
_CONTAINERS = {
    **dict.fromkeys(("BUILD_LIST", "LIST_APPEND", "LIST_EXTEND"), "a list"),
    **dict.fromkeys(("BUILD_MAP", "BUILD_CONST_KEY_MAP", "MAP_ADD", "DICT_UPDATE"), "a dict"),
    **dict.fromkeys(("BUILD_SET", "SET_ADD", "SET_UPDATE"), "a set"),
}


def check_game_name(name) -> str:
    """``name`` when it is a valid game name (``GAME_NAME``); otherwise ``ValueError``."""
    if not isinstance(name, str) or not GAME_NAME.fullmatch(name):
        raise ValueError(
            f"game name {name!r} is not valid: a letter, then letters, digits, '_' or '-', at "
            "most 64 (e.g. 'minatar-breakout'); it names files and config sections"
        )
    return name


def _numbered(code: types.CodeType):
    """``(instruction, line)`` for ``code`` and the code nested in it (comprehensions)."""
    line = code.co_firstlineno
    for instruction in dis.get_instructions(code):
        positions = getattr(instruction, "positions", None)  # Python 3.11+
        start = instruction.starts_line  # an int before 3.13
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif isinstance(start, int) and not isinstance(start, bool):
            line = start
        yield instruction, line
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _numbered(const)


def forbidden_construct(fn) -> tuple[str, int] | None:
    """The first rule of compiled game code that ``fn`` breaks, as ``(what it does, line)``:
    assigning to an attribute of ``io``, ``s`` or ``p``, building a list, dict or set, or
    calling a NumPy function that allocates. ``None`` when it breaks none of them."""
    code = fn.__code__
    objects = set(code.co_varnames[: code.co_argcount]) & set(OBJECTS)
    previous = None
    for instruction, line in _numbered(code):
        op, arg = instruction.opname, instruction.argval
        if op in ("STORE_ATTR", "DELETE_ATTR") and previous in objects:
            return (
                f"assigns to {previous}.{arg} (write into its array: {previous}.{arg}[i] = ...)",
                line,
            )
        if op in _CONTAINERS:
            return f"builds {_CONTAINERS[op]} (a game may not allocate: use a state array)", line
        value = fn.__globals__.get(arg) if op == "LOAD_GLOBAL" else None
        if isinstance(value, types.ModuleType) and value.__name__ == "numpy":
            previous = "np"
            continue
        allocates = (op in ("LOAD_ATTR", "LOAD_METHOD") and previous == "np") or (
            value is not None and getattr(np, getattr(value, "__name__", ""), None) is value
        )
        name = arg if op != "LOAD_GLOBAL" else getattr(value, "__name__", "")
        if allocates and name in ALLOCATORS:
            return f"calls np.{name} (a game may not allocate: use a state array)", line
        previous = arg if op.startswith("LOAD_FAST") else None
        previous = previous[-1] if isinstance(previous, tuple) else previous
    return None


@dataclass(frozen=True)
class Field:
    """One state array: ``shape(params)`` is the per-environment shape (``()`` for a scalar).

    ``low`` and ``high`` bound every value the game can put in it (inclusive; a number or a
    function of the params; ``None``: no bound beyond the dtype's). ``load_state_dict`` refuses
    state from a file with a value outside them, so an index field must declare the range that
    keeps every array access in bounds. Float fields must also be finite. A bound may read only
    params that set buffer shapes: a resumed state is checked before a curriculum restores its
    stage, and episodes in flight keep values an earlier stage allowed.
    """

    name: str
    shape: Callable[[object], tuple[int, ...]]
    dtype: type
    doc: str = ""
    low: float | Callable[[object], float] | None = None
    high: float | Callable[[object], float] | None = None

    def bounds(self, params) -> tuple[float | None, float | None]:
        """``(low, high)`` for ``params`` (``None`` where unbounded)."""
        low = self.low(params) if callable(self.low) else self.low
        high = self.high(params) if callable(self.high) else self.high
        return low, high


@dataclass(frozen=True)
class GameSpec:
    """Everything the kernels need to know about a game.

    ``reset_one(i, io, s, p)`` and ``step_one(i, io, s, p)`` are plain Python, allocation-free
    scalar functions of env ``i`` over three objects the kernels build: ``io`` holds the I/O
    buffers (``IO_BUFFERS``: ``io.obs``, ``io.actions``, ``io.rewards`` ...), ``s`` the state
    (``s.rng``, the env's random stream, and each array of ``state`` by its name) and ``p`` the
    params (``p.width``; a str param as the index of its value in ``choices``). Helpers take
    the same objects (``move(i, action, s, p)``).

    Agent games (``observe`` given) hold ``num_agents`` agents per environment (an int, or a
    function of the params). Their I/O buffers are indexed ``[i, a]``; ``step_one`` applies
    every agent's action in a fixed order and sets ``rewards``, ``terminated`` and
    ``truncated`` per agent, ``observe(i, a, io, s, p)`` writes agent ``a``'s observation into
    ``io.obs_flat`` from the state, and ``reset_agent(i, a, io, s, p)`` (optional) restarts one
    agent whose episode ended while the others play on. The runtime calls them in this order
    each step: the game's step, ``observe`` into ``final_obs`` (its ``io.obs`` then) for every
    agent that ended, then ``reset_one`` when all agents ended (or, for a game without
    ``reset_agent``, when any did: the others are truncated), else ``reset_agent`` for each
    agent that ended, then ``observe`` for all.
    """

    name: str
    params_cls: type
    state: tuple[Field, ...]
    obs_shape: Callable[[object], tuple[int, ...]]
    obs_dtype: type
    num_actions: int | Callable[[object], int]
    """discrete actions per agent: an int, or a function of the params (fixed once the
    environments are made: ``set_params`` refuses to change it)"""
    reset_one: Callable
    step_one: Callable
    render_text: Callable
    render_rgb: Callable | None = None
    """``render_rgb(state, obs, params) -> uint8 (H, W, 3)``: a colour picture of one
    environment from its host state and observation (rows of agent games), or ``None``"""
    num_agents: int | Callable[[object], int] = 1
    observe: Callable | None = None
    reset_agent: Callable | None = None
    obs_categories: int = 0
    """> 0: every observation entry is a category code in [0, obs_categories) (models one-hot
    it); 0: numbers"""
    choices: dict = dataclasses.field(default_factory=dict, hash=False)
    """str params: name -> the tuple of valid values; kernels receive the value's index"""
    check_state: Callable | None = None
    """``check_state(state, params) -> str | None``: the invariants between state arrays that the
    fields' ``low``/``high`` cannot say (a body that matches its grid ...), over host arrays
    with a leading environment axis, vectorised; returns what is wrong in the first bad
    environment (``"env 3: ..."``) or ``None``. ``load_state_dict`` calls it after the bounds."""
    module: object = None

    def __post_init__(self):
        check_game_name(self.name)
        if not callable(self.num_actions) and not _is_count(self.num_actions):
            raise ValueError(
                f"game {self.name!r}: num_actions must be an int >= 1 or a function of the "
                f"params, got {self.num_actions!r}"
            )
        if self.observe is None:
            if self.num_agents != 1 or self.reset_agent is not None:
                raise ValueError(
                    f"game {self.name!r}: a game with num_agents != 1 or reset_agent must "
                    "define observe(i, a, obs_flat, ...)"
                )
        elif not (callable(self.num_agents) or isinstance(self.num_agents, int)):
            raise ValueError(f"game {self.name!r}: num_agents must be an int or a function")
        names = {f.name for f in self.state}
        params = {f.name for f in dataclasses.fields(self.params_cls)}
        defaults = self.params_cls()
        for field in dataclasses.fields(self.params_cls):
            default = getattr(defaults, field.name)
            if isinstance(default, str) and default not in self.choices.get(field.name, ()):
                raise ValueError(
                    f"game {self.name!r}: str param {field.name!r} needs its valid values in "
                    "GameSpec.choices (kernels receive the index)"
                )
        reserved = set(RUNTIME_ARGS) | set(LAUNCHER_NAMES)
        for clash in (names & reserved, params & reserved, names & params):
            if clash:
                raise ValueError(f"game {self.name!r}: names used twice: {sorted(clash)}")
        for name in sorted(names | params):  # they become attributes of s and p
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
                raise ValueError(
                    f"game {self.name!r}: {name!r} must be a Python name not starting with _"
                )
        self._check_functions(names, params)

    def _check_functions(self, names: set, params: set) -> None:
        """Entry points take ``(i, io, s, p)`` (agent ones ``(i, a, io, s, p)``), and every
        function they reach reads only attributes its objects have."""
        for fn in self.functions():
            args = list(inspect.signature(fn).parameters)
            first = ["i", "a"] if fn in (self.observe, self.reset_agent) else ["i"]
            if args != [*first, *OBJECTS]:
                what = "the env index `i`" + (" and the agent index `a`" if len(first) > 1 else "")
                raise ValueError(
                    f"{self.name}.{fn.__name__} must take {what} first, then the objects io "
                    "(I/O buffers), s (state) and p (params), read as io.obs, s.<state array>, "
                    f"p.<param>: def {fn.__name__}({', '.join([*first, *OBJECTS])}); it takes "
                    f"({', '.join(args)}) (see the README, 'Write a game')"
                )
        valid = {"io": set(IO_BUFFERS), "s": {RNG} | names, "p": params}
        seen = set()
        for fn in [f for root in self.functions() for f in call_graph(root)]:
            if fn in seen:
                continue
            seen.add(fn)
            for obj, attr in _object_attributes(fn):
                if attr not in valid[obj]:
                    raise ValueError(
                        f"{self.name}.{fn.__name__} reads {obj}.{attr}, which the game does "
                        f"not have; valid: io {sorted(valid['io'])}, s {sorted(valid['s'])}, "
                        f"p {sorted(valid['p'])}"
                    )
            broken = forbidden_construct(fn)
            if broken:
                where = f"{inspect.getsourcefile(fn) or fn.__code__.co_filename}:{broken[1]}"
                raise ValueError(f"game {self.name!r}: {fn.__name__} ({where}) {broken[0]}")

    @property
    def agent_game(self) -> bool:
        """True for games with the agents axis (``observe`` defined), even with one agent."""
        return self.observe is not None

    def agents(self, params) -> int:
        """Agents per environment for ``params``."""
        n = self.num_agents(params) if callable(self.num_agents) else self.num_agents
        if not _is_count(n):
            raise ValueError(f"game {self.name!r}: num_agents must be an int >= 1, got {n!r}")
        return int(n)

    def actions(self, params) -> int:
        """Discrete actions per agent for ``params``."""
        n = self.num_actions(params) if callable(self.num_actions) else self.num_actions
        if not _is_count(n):
            raise ValueError(f"game {self.name!r}: num_actions must be an int >= 1, got {n!r}")
        return int(n)

    def functions(self) -> tuple:
        """The game's scalar entry points (step, reset, and for agent games observe and
        reset_agent when defined)."""
        fns = (self.step_one, self.reset_one, self.observe, self.reset_agent)
        return tuple(fn for fn in fns if fn is not None)

    def make_params(self, **overrides):
        """Build validated params from keyword overrides (unknown keys raise ``ValueError``)."""
        valid = {f.name: f for f in dataclasses.fields(self.params_cls)}
        unknown = set(overrides) - set(valid)
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {sorted(unknown)} for game {self.name!r}; "
                f"valid: {sorted(valid)}"
            )
        for key, value in overrides.items():
            default = getattr(self.params_cls(), key)
            if isinstance(default, str):
                valid_values = self.choices.get(key, ())
                if not isinstance(value, str) or value not in valid_values:
                    raise ValueError(
                        f"game {self.name!r} parameter {key!r} must be one of "
                        f"{', '.join(valid_values)}; got {value!r}"
                    )
                continue
            if isinstance(default, bool) or isinstance(value, (bool, np.bool_)):
                ok = isinstance(value, (bool, np.bool_)) and isinstance(default, bool)
            elif isinstance(default, int):
                ok = isinstance(value, (int, np.integer))
            else:
                ok = isinstance(value, (int, float, np.integer, np.floating))
            if not ok:
                raise TypeError(
                    f"game {self.name!r} parameter {key!r} must be "
                    f"{type(default).__name__}, got {type(value).__name__} {value!r}"
                )
            if isinstance(default, float) and not _finite(value):
                raise ValueError(f"{self.name}.{key} must be finite, got {value}")
            if isinstance(default, float) and abs(value) > FLOAT32_MAX:
                raise ValueError(
                    f"{self.name}.{key} = {value:g} does not fit float32, the games' arithmetic "
                    f"(|x| <= {FLOAT32_MAX:.3g})"
                )
            if type(default) is int and not -(2**63) <= value < 2**63:
                raise ValueError(f"{self.name}.{key} must fit in int64, got {value}")
        # one kernel argument type per param: 1 for a float param is 1.0 (an int would compile
        # a second specialisation of every launcher)
        # (and a NumPy scalar is a Python one)
        kinds = {key: type(getattr(self.params_cls(), key)) for key in overrides}
        fixed = {
            key: value if kinds[key] is str else kinds[key](value)
            for key, value in overrides.items()
        }
        return self.params_cls(**fixed)

    def param_values(self, params) -> dict:
        """Params as plain Python scalars, in field order, for kernel arguments (a str param
        as the index of its value in ``choices``)."""
        values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
        for name, options in self.choices.items():
            values[name] = options.index(values[name])
        return values

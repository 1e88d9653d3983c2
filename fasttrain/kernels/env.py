"""``KernelEnv``: a game's preallocated buffers plus its launchers, with no learner attached.

This is what ``fasttrain.make`` wraps with torch views, and what other projects embed directly:
every buffer is a backend array (NumPy on ``cpu``/``python``, CuPy on ``cuda``) that any DLPack
consumer can read without copying.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from .backends import get_backend
from .build import launcher_args, object_fields, object_types
from .gpu import CUDA_LAYOUT, LAYOUTS, cuda_layout  # noqa: F401 - the layouts, named here too
from .rng import check_int, check_seeds, population_streams
from .spec import GameSpec
from .statecheck import check_state

# Per-env episode sums (dtype), reduced to means and cleared by ``stats()``.
_STAT_SUMS = {
    "done_return": np.float64,
    "done_length": np.int64,
    "done_score": np.float64,
    "done_count": np.int64,
}


# the step launcher's arguments that say where its outputs go (see ``KernelEnv.step_args``)
_OUT_ARGS = (
    *("obs", "obs_flat", "obs_words", "final_obs", "final_obs_flat", "final_obs_words"),
    *("rewards", "terminated", "truncated"),
)


# Arrays with one row per agent (rows = num_envs * num_agents, agent-major within an env); every
# other array (rng, the game's state) has one row per environment.
PER_AGENT = (
    *("obs", "final_obs", "actions", "rewards", "terminated", "truncated", "score"),
    *("ep_return", "ep_length", *_STAT_SUMS),
)


def buffer_layout(spec: GameSpec, params) -> dict:
    """Per-row shape and dtype of every array ``allocate`` makes, by name.

    Args:
        spec: the game's spec.
        params: an instance of ``spec.params_cls``.

    Returns:
        dict name -> ``(shape, dtype)``; the runtime prepends ``num_envs * num_agents`` to the
        shapes named in ``PER_AGENT`` and ``num_envs`` to the others.
    """
    obs_shape = tuple(spec.obs_shape(params))
    shapes = {
        "obs": (obs_shape, spec.obs_dtype),  # (R, *obs_shape) observation after the step
        "final_obs": (obs_shape, spec.obs_dtype),  # (R, *obs_shape) last obs of ended episodes
        "actions": ((), np.int64),  # (R,) action per agent row, in [0, num_actions)
        "rewards": ((), np.float32),  # (R,) reward of the last step
        "terminated": ((), np.bool_),  # (R,) the MDP ended (death, win)
        "truncated": ((), np.bool_),  # (R,) a time limit cut the episode
        "rng": ((), np.uint64),  # (N,) xorshift64 state per env
        "score": ((), np.float32),  # (R,) game score of the running episode
        "ep_return": ((), np.float64),  # (R,) return of the running episode
        "ep_length": ((), np.int32),  # (R,) steps of the running episode
    }
    shapes.update({name: ((), dtype) for name, dtype in _STAT_SUMS.items()})
    for field in spec.state:
        shapes[field.name] = (tuple(field.shape(params)), field.dtype)
    return shapes


def shape_params(spec: GameSpec, old, new) -> list[str]:
    """Names of the params that make ``new`` change a buffer's shape (or the agents, or the
    actions: a policy's output) from ``old``: each one that does so alone, else every changed
    one; ``[]`` when none does."""

    def shapes(params):
        return buffer_layout(spec, params), spec.agents(params), spec.actions(params)

    if shapes(new) == shapes(old):
        return []
    changed = [name for name, value in vars(old).items() if getattr(new, name) != value]
    culprits = []
    for name in changed:
        try:
            alone = dataclasses.replace(old, **{name: getattr(new, name)})
            if shapes(alone) != shapes(old):
                culprits.append(name)
        except (TypeError, ValueError):  # invalid on its own: only the combination is valid
            continue
    return culprits or changed


def _leading(spec: GameSpec, params, num_envs: int) -> dict:
    rows = num_envs * spec.agents(params)
    return {name: rows if name in PER_AGENT else num_envs for name in buffer_layout(spec, params)}


def env_minor_zeros(xp, rows: int, shape: tuple, dtype):
    """A zeroed ``(rows, *shape)`` array laid out environment-minor: element ``[i, k]`` of row
    ``i`` sits beside ``[i + 1, k]`` in memory, so the threads of a warp, one per row, touching
    the same ``k`` touch one stretch of memory (Fortran order; Numba types it ``F``). Four
    MinAtar step kernels need many more registers over it (52-80 -> 94-214, sm_90, offline
    ptxas; a strided ``A`` view measured the same), so the cuda backend's default layout keeps
    the state in rows (``cuda.CUDABackend.LAYOUT``)."""
    return xp.zeros((rows, *shape), dtype=dtype, order="F")


def env_minor_stage(xp, rows: int, shape: tuple, dtype):
    """The observations a kernel writes, env-minor: ``(rows, *shape)`` over ``(*shape, rows)``
    memory in C order, so that the flat view ``(rows, S)`` keeps a row's C-order element order
    (``io.obs_flat``) and is Fortran-ordered, and ``(S, rows)`` is the memory itself."""
    return xp.moveaxis(xp.zeros((*shape, rows), dtype=dtype), -1, 0)


def check_layout(layout) -> str:
    """``layout`` if it is one of ``LAYOUTS``, else ValueError in one line naming them."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    return layout


def allocate(spec: GameSpec, params, num_envs: int, xp, env_minor: bool = False) -> dict:
    """Every array a game and its runtime use, for ``num_envs`` environments, zeroed.

    Args:
        spec: the game's spec.
        params: an instance of ``spec.params_cls``.
        num_envs: number of environments.
        xp: array module (``numpy`` or ``cupy``).
        env_minor: lay the game's state arrays that hold more than one value per environment
            out environment-minor (``env_minor_zeros``, the ``env-minor`` layout); the shapes
            and values are the same either way.

    Returns:
        dict name -> array; I/O buffers and episode counters with one row per agent, the RNG
        and the game's state with one row per environment.
    """
    layout = buffer_layout(spec, params)
    lead = _leading(spec, params, num_envs)
    minor = {f.name for f in spec.state} if env_minor else set()
    return {
        name: env_minor_zeros(xp, lead[name], shape, dt)
        if name in minor and shape
        else xp.zeros((lead[name], *shape), dtype=dt)
        for name, (shape, dt) in layout.items()
    }


def buffer_nbytes(spec: GameSpec, params, num_envs: int) -> int:
    """Bytes ``allocate`` would take for ``num_envs`` environments."""
    lead = _leading(spec, params, num_envs)
    return sum(
        lead[name] * math.prod(shape) * np.dtype(dt).itemsize
        for name, (shape, dt) in buffer_layout(spec, params).items()
    )


def check_memory(need: int, what: str, xp=np) -> None:
    """MemoryError in one line when ``need`` bytes for ``what`` exceed what the host (``xp`` is
    NumPy) or the GPU can give: the one size check made before any big allocation."""
    limit, has = _memory_limit(xp)
    if limit is not None and need > limit:
        raise MemoryError(f"{what} need {need:,} bytes ({need / 2**30:,.1f} GiB); {has}")


def host_memory_available() -> int | None:
    """Bytes of host memory new buffers can take now: free memory plus what the kernel can
    reclaim (Linux's MemAvailable; zeroed pages are only committed when first written, so a
    bigger buffer would be killed at its first write), else the physical total; None where
    neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): allocation decides
        return None


def _memory_limit(xp) -> tuple[int | None, str]:
    """Bytes new buffers can have at most, and a phrase saying so (None: unknown): the host's
    available memory, or on a GPU, where an allocation fails cleanly, the device's total (what
    is free depends on the caching allocators)."""
    if xp is not np:
        total = int(xp.cuda.runtime.memGetInfo()[1])
        return total, f"the GPU has {total:,} bytes"
    available = host_memory_available()
    if available is None:
        return None, ""
    return available, f"this machine has {available:,} bytes available"


def objects(spec: GameSpec, params, arrays: dict, final_obs: bool = False) -> tuple:
    """The ``(io, s, p)`` objects a game's functions take, over buffers laid out as
    ``allocate`` makes them, for calling the functions directly (tests, parity checks).

    Args:
        spec: the game.
        params: its params.
        arrays: every buffer by name (``allocate``'s layout), e.g. host copies of an env's.
        final_obs: ``io.obs`` and ``io.obs_flat`` are the final observation buffers, as in the
            ``observe`` call for an agent whose episode ended.

    Returns:
        ``(io, s, p)``: per-agent buffers viewed ``[i]`` (or ``[i, a]``), state arrays
        ``[i, ...]``, params as the launchers pass them (a str param as its index).
    """
    lead = (arrays["rng"].shape[0],)
    if spec.agent_game:
        lead += (spec.agents(params),)
    views = {name: arrays[name].reshape(*lead, *arrays[name].shape[1:]) for name in PER_AGENT}
    obs = "final_obs" if final_obs else "obs"
    views["obs"], views["obs_flat"] = views[obs], arrays[obs].reshape(*lead, -1)
    source = {**arrays, **views, **spec.param_values(params)}
    kinds = object_types(spec)
    return tuple(
        kind(*(source[name] for name in fields))
        for kind, fields in zip(kinds, object_fields(spec), strict=True)
    )


def _words(flat):
    """``flat`` (rows contiguous) viewed as uint64 words when its row size allows it."""
    if flat.dtype.itemsize * flat.shape[-1] % 8 == 0 and flat.flags.c_contiguous:
        return flat.view(np.uint64)
    return flat


class StepArgs(tuple):
    """A step's launcher arguments, and the observation copy that completes the step on an
    env-minor backend: ``copy`` is ``(stage, destination)``, the ``(S, R)`` env-minor
    observations the kernel wrote and the ``(R, S)`` buffer they go to (None: no copy, the
    kernel wrote the destination itself)."""

    copy: tuple | None

    def __new__(cls, args, copy=None):
        self = super().__new__(cls, args)
        self.copy = copy
        return self


class KernelEnv:
    """Preallocated buffers and compiled launchers for ``num_envs`` copies of one game.

    ``layout`` (one of ``LAYOUTS``; default: the backend's, ``obs-minor`` on cuda) is where the
    kernels keep each environment's values (docs/kernels.md#memory-layout); every buffer a
    reader sees (``arrays["obs"]``, ``state_dict``) holds the same values in any layout."""

    def __init__(
        self,
        spec: GameSpec,
        num_envs: int,
        backend: str,
        params,
        seed: int | tuple[int, ...] = 0,
        action_repeat: int = 1,
        layout: str | None = None,
    ):
        num_envs = check_int(num_envs, "num_envs")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        action_repeat = check_int(action_repeat, "action_repeat")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        if action_repeat > 1 and spec.agent_game:
            raise ValueError(
                f"action_repeat needs a single-agent game; {spec.name!r} has agents that end "
                "their lives at different steps (use action_repeat = 1)"
            )
        # each step() plays the game up to this many times with the same actions, summing the
        # rewards and stopping at the episode's end (one launch; Atari's frame skip)
        self.action_repeat = action_repeat
        self.spec = spec
        self.params = params
        self.num_envs = num_envs
        self.num_agents = spec.agents(params)
        self.num_rows = num_envs * self.num_agents  # rows of every per-agent buffer
        self.num_actions = spec.actions(params)  # actions per agent: fixed, like the shapes
        # one int, or a population's seeds: block k of num_envs // M envs seeded by seed[k]
        self.seed = check_seeds(seed, num_envs)
        self.backend = get_backend(backend)
        self.xp = self.backend.xp
        # the layout of the kernels' working memory (LAYOUTS, docs/kernels.md#memory-layout):
        # env-minor, a warp's threads (one per env) touching the same element touch one stretch
        # of memory; the backend's choice (cuda: obs-minor) unless given; every layout gives
        # the same values, and the buffers a user or learner reads are env-major rows in all
        self.layout = check_layout(self.backend.layout if layout is None else layout)
        self._allocate()
        self.launchers = self.backend.compile(spec)
        # cudaStream_t the cuda backend launches on and orders its array work on (0: the legacy
        # default stream, which torch and CuPy also use unless told otherwise); fasttrain.VecEnv
        # sets it to torch's current stream
        self.stream = 0
        self._prepare_launches()

    def _allocate(self) -> None:
        """Every buffer, in this env's layout, refused in one line where it cannot fit; the
        streams seeded (an rng word of 0 is xorshift's fixed point: it draws 0 forever)."""
        spec, params, num_envs = self.spec, self.params, self.num_envs
        need = buffer_nbytes(spec, params, num_envs)
        if self.layout != "env-major":  # the env-minor observations the kernels write
            obs_shape, obs_dtype = buffer_layout(spec, params)["obs"]
            need += self.num_rows * math.prod(obs_shape) * np.dtype(obs_dtype).itemsize
        check_memory(need, f"{num_envs:,} {spec.name} envs", self.xp)
        minor_state = self.layout == "env-minor"
        self.arrays = allocate(spec, params, num_envs, self.xp, minor_state)
        self._stage = None  # (R, *obs_shape), a view of its (*obs_shape, R) memory (.base)
        if self.layout != "env-major":
            obs = self.arrays["obs"]
            self._stage = env_minor_stage(self.xp, obs.shape[0], obs.shape[1:], obs.dtype)
        self.arrays["rng"][...] = self.xp.asarray(population_streams(self.seed, num_envs))

    def _prepare_launches(self) -> None:
        """The step's and the reset's launcher arguments into the env's own buffers, built
        once, and the launchers compiled here (with a notice on a cold cache), not silently
        inside the first launches."""
        spec = self.spec
        self._step_names, self._reset_names = launcher_args(spec)
        self._values = self._launch_values(self.params)
        # bumped by set_params: launcher arguments built before it hold the old values
        self.params_version = 0
        self._out_positions = [self._step_names.index(name) for name in _OUT_ARGS]
        out_views = self._out_views(self.arrays["obs"], self.arrays["final_obs"])
        # launcher arguments of ``step`` into the env's own buffers, built once
        self._step_args = StepArgs(
            self.backend.prepare_args(
                self._args(self._step_names, dict(zip(_OUT_ARGS, out_views, strict=True)))
            ),
            self._obs_copy(self.arrays["obs"]),
        )
        obs, obs_flat = out_views[:2]
        # launcher arguments of ``reset`` (on cuda: device arrays), built once
        self.reset_args = self.backend.prepare_args(
            self._args(self._reset_names, {"obs": obs, "obs_flat": obs_flat})
        )
        self.backend.warm_up(spec, self.launchers, self._step_args, self.reset_args)

    def _launch_values(self, params) -> dict:
        """Scalar launcher arguments: the params' values, the action count and the repeat."""
        values = self.spec.param_values(params)
        return {**values, "num_actions": self.num_actions, "repeat": self.action_repeat}

    def _lead(self) -> tuple:
        """Leading shape of per-agent launcher views: (N,), or (N, A) for agent games."""
        return (self.num_envs, self.num_agents) if self.spec.agent_game else (self.num_envs,)

    def _args(self, names, overrides):
        lead = self._lead()
        views = {  # per-agent buffers as launcher views indexed [i] or [i, a]
            name: self.arrays[name].reshape(*lead, *self.arrays[name].shape[1:])
            for name in PER_AGENT
        }
        source = {**self.arrays, **views, **self._values, **overrides}
        return tuple(source[name] for name in names)

    def _out_views(self, obs, final_obs, rewards=None, terminated=None, truncated=None) -> tuple:
        """The ``_OUT_ARGS`` views of an observation buffer pair and of the per-row outputs
        (default: the env's own), env-minor: the kernel writes the observations into the env's
        stage, and ``obs`` gets them by ``_obs_copy``."""
        lead = self._lead()
        rows = (rewards, terminated, truncated)
        rows = [
            self.arrays[n] if a is None else a for n, a in zip(_OUT_ARGS[6:], rows, strict=True)
        ]
        rows = tuple(a.reshape(lead) for a in rows)
        if self._stage is not None:
            obs = self._stage
        obs_view = obs.reshape(*lead, *obs.shape[1:])
        final_view = final_obs.reshape(*lead, *final_obs.shape[1:])
        flat, final_flat = obs.reshape(*lead, -1), final_obs.reshape(*lead, -1)
        if self._stage is not None:  # element by element: the stage's rows are not contiguous
            return obs_view, flat, flat, final_view, final_flat, final_flat, *rows
        # final_obs is copied word by word: LLVM cannot vectorise a byte copy between
        # buffers that may alias, and this copy runs on every episode end
        return obs_view, flat, _words(flat), final_view, final_flat, _words(final_flat), *rows

    def _obs_copy(self, obs) -> tuple | None:
        """``StepArgs.copy`` for observations bound for ``obs`` (None: env-major, no copy)."""
        if self._stage is None:
            return None
        stage = self._stage.base.reshape(-1, self.num_rows)  # (S, R), C-contiguous
        return self.backend.prepare_args((stage, obs.reshape(self.num_rows, -1)))

    def step_args(
        self, obs, final_obs=None, rewards=None, terminated=None, truncated=None
    ) -> tuple:
        """Launcher arguments writing observations into ``obs``, for rows whose episode ends
        final observations into ``final_obs``, and the rows' rewards and flags into
        ``rewards``, ``terminated`` and ``truncated`` (default: the env's own buffers).

        Build them once per set of buffers and pass them to every ``step``: on cuda this
        converts each output array to a device array, which is too slow to do per step."""
        final_obs = self.arrays["final_obs"] if final_obs is None else final_obs
        args = list(self._step_args)  # every other argument is already prepared
        outputs = self._out_views(obs, final_obs, rewards, terminated, truncated)
        views = self.backend.prepare_args(outputs)
        for position, view in zip(self._out_positions, views, strict=True):
            args[position] = view
        return StepArgs(args, self._obs_copy(obs))

    def objects(self, arrays: dict | None = None, final_obs: bool = False) -> tuple:
        """The ``(io, s, p)`` objects over ``arrays`` (default: the env's own buffers), as the
        launchers build them: ``spec.step_one(i, *env.objects())`` steps env ``i`` uncompiled.
        See ``objects``."""
        arrays = self.arrays if arrays is None else arrays
        return objects(self.spec, self.params, arrays, final_obs)

    def set_params(self, params) -> None:
        """Switch to ``params`` between steps, with no recompilation and no reallocation.

        Only params that leave every buffer's shape (and the agents and actions) as they are
        may change; the others raise ``ValueError`` in one line, changing nothing. Launcher
        arguments built before (``step_args``) hold the old values: pass them through
        ``refresh_args``."""
        if not isinstance(params, self.spec.params_cls):
            raise TypeError(f"params must be a {self.spec.params_cls.__name__}")
        culprits = shape_params(self.spec, self.params, params)
        if culprits:
            names = ", ".join(repr(name) for name in culprits)
            raise ValueError(
                f"game {self.spec.name!r} parameter {names} sets buffer shapes and cannot "
                "change after the environments are made"
            )
        self.params = params
        self._values = self._launch_values(params)
        self._step_args = self.refresh_args(self._step_args)
        self.reset_args = self._with_values(self.reset_args, self._reset_names)
        self.params_version += 1

    def _with_values(self, args: tuple, names) -> tuple:
        values = tuple(self._values.get(n, a) for n, a in zip(names, args, strict=True))
        return StepArgs(values, args.copy) if isinstance(args, StepArgs) else values

    def refresh_args(self, args: tuple) -> tuple:
        """Step launcher arguments ``args`` with the current params' values (see set_params)."""
        return self._with_values(args, self._step_names)

    @property
    def state(self) -> dict:
        """The game's state arrays by name (writable backend arrays)."""
        return {f.name: self.arrays[f.name] for f in self.spec.state}

    def reset(self, seed=None):
        """Reset every environment. With ``seed``: reseed the per-env streams and clear the
        game's state first, so the environments start exactly as new ones made with that seed
        (state that a game carries from episode to episode, such as MinAtar's previous action
        for sticky actions, starts over too). A sequence of M seeds (M dividing ``num_envs``)
        makes a population: block k of ``num_envs // M`` environments starts, and steps, as a
        solo env of that size reset with ``seed[k]``."""
        if seed is not None:
            seed = check_seeds(seed, self.num_envs)
        with self.backend.on_stream(self.stream):
            if seed is not None:
                self.seed = seed
                streams = population_streams(seed, self.num_envs)
                self.arrays["rng"][...] = self.xp.asarray(streams)
                for f in self.spec.state:
                    self.arrays[f.name][...] = 0
            for name in _STAT_SUMS:
                self.arrays[name][...] = 0
        self.backend.launch_reset(self.launchers, self.reset_args, self.num_envs, self.stream)
        if self._stage is not None:  # into the env's own observations, as its own steps
            self.backend.copy_rows(*self._step_args.copy, self.stream)
        return self.arrays["obs"]

    def step(self, args=None, check: bool = True) -> int:
        """One step of every env with the actions in ``arrays['actions']``.

        Returns -1, or the index of the first out-of-range action (nothing was changed then).
        ``check=False`` skips the host-side check on backends that cannot check inside the
        kernel (cuda), for callers whose actions are in range by construction.
        """
        if check and not self.backend.validates_in_kernel:
            actions = self.arrays["actions"]
            with self.backend.on_stream(self.stream):
                bad = self.xp.flatnonzero((actions < 0) | (actions >= self.num_actions))
                if bad.size:
                    return int(bad[0])
        args = args or self._step_args
        bad = self.backend.launch_step(self.launchers, args, self.num_envs, self.stream)
        if self._stage is not None and bad < 0:  # env-minor: args are step_args' StepArgs
            self.backend.copy_rows(*args.copy, self.stream)
        return bad

    def stats(self) -> dict:
        """Means over episodes finished since the last call (empty dict when none), then clear."""
        with self.backend.on_stream(self.stream):
            count = int(self.arrays["done_count"].sum())
            if count == 0:
                return {}
            out = {
                "return": float(self.arrays["done_return"].sum()) / count,
                "length": float(self.arrays["done_length"].sum()) / count,
                "score": float(self.arrays["done_score"].sum()) / count,
                "episodes": count,
            }
            for name in _STAT_SUMS:
                self.arrays[name][...] = 0
        return out

    def state_dict(self) -> dict:
        """Host (NumPy) copies of every buffer, enough to continue bit for bit."""
        self.backend.synchronize()
        # C order whatever the layout: a state saved on one backend loads on any other
        return {
            name: np.array(self.backend.to_host(a), order="C") for name, a in self.arrays.items()
        }

    def load_state_dict(self, arrays: dict) -> None:
        """Copy ``state_dict()`` output back in; every array is checked before any is written:
        its shape, its dtype and its values (``StateError`` names the first value the game could
        not have produced, see ``statecheck.py``)."""
        if not isinstance(arrays, dict):
            raise TypeError(
                f"expected a dict of arrays from state_dict(), got {type(arrays).__name__}"
            )
        missing = [name for name in self.arrays if name not in arrays]
        if missing:
            raise ValueError(
                f"state_dict lacks environment array{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(n) for n in missing[:5])}{' ...' if len(missing) > 5 else ''}"
            )
        for name, value in arrays.items():
            mine = self.arrays.get(name)
            if mine is None or tuple(mine.shape) != tuple(np.shape(value)):
                raise ValueError(f"environment array {name!r} does not fit this env")
            dtype = np.asarray(value).dtype
            if dtype != mine.dtype:
                raise ValueError(
                    f"environment array {name!r} has dtype {dtype}, this env uses {mine.dtype}"
                )
        # values too: no kernel may see one its game cannot produce (statecheck.py)
        host = {name: np.asarray(value) for name, value in arrays.items()}
        check_state(self.spec, self.params, host, self.num_actions)
        with self.backend.on_stream(self.stream):
            for name, value in arrays.items():
                self.arrays[name][...] = self.xp.asarray(value)
            if self._stage is not None:  # what the kernels see as the last observations
                self._stage[...] = self.arrays["obs"]

    def _host_state(self, i) -> dict:
        i = check_int(i, "env index")
        if not 0 <= i < self.num_envs:
            raise IndexError(f"env index {i} out of range [0, {self.num_envs})")
        return {f.name: self.backend.to_host(self.arrays[f.name][i]) for f in self.spec.state}

    def render(self, i: int = 0) -> str:
        """Text picture of environment ``i``."""
        return self.spec.render_text(self._host_state(i), self.params)

    def render_rgb(self, i: int = 0) -> np.ndarray:
        """Colour picture of environment ``i``: uint8 ``(H, W, 3)`` (games with ``render_rgb``)."""
        if self.spec.render_rgb is None:
            raise ValueError(f"game {self.spec.name!r} has no colour rendering (render_rgb)")
        host = self._host_state(i)
        rows = self.num_agents
        obs = self.backend.to_host(self.arrays["obs"][i * rows : (i + 1) * rows])
        return self.spec.render_rgb(host, obs if rows > 1 else obs[0], self.params)


def speed_check(spec: GameSpec, params, argv=()) -> float:
    """A game's ``__main__``: agent-steps/s on the cpu backend, random actions made beforehand.

    ``argv``: optional ``[num_envs [num_steps]]`` (default 4096 envs, 2000 steps).
    """
    import time

    num_envs = int(argv[0]) if len(argv) > 0 else 4096
    num_steps = int(argv[1]) if len(argv) > 1 else 2000
    env = KernelEnv(spec, num_envs, "cpu", params)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.num_actions, (num_steps, env.num_rows), dtype=np.int64)
    env.step()  # compile (or load from cache) outside the timing
    start = time.perf_counter()
    for t in range(num_steps):
        env.arrays["actions"][:] = actions[t]
        env.step()
    rate = env.num_rows * num_steps / (time.perf_counter() - start)
    what = "env-steps/s" if env.num_agents == 1 else f"agent-steps/s, {env.num_agents} agents/env"
    print(f"{spec.name} cpu: {rate:,.0f} {what} ({num_envs} envs)")
    return rate

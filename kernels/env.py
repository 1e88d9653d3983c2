"""``KernelEnv``: a game's preallocated buffers plus its launchers, with no learner attached.

This is what ``fasttrain.make`` wraps with torch views, and what other projects embed directly:
every buffer is a backend array (NumPy on ``cpu``/``python``, CuPy on ``cuda``) that any DLPack
consumer can read without copying.
"""

from __future__ import annotations

import numpy as np

from .backends import get_backend
from .build import launcher_args
from .rng import seed_streams
from .spec import GameSpec

# Per-env episode sums (dtype), reduced to means and cleared by ``stats()``.
_STAT_SUMS = {
    "done_return": np.float64,
    "done_length": np.int64,
    "done_score": np.float64,
    "done_count": np.int64,
}


def allocate(spec: GameSpec, params, num_envs: int, xp) -> dict:
    """Every array a game and its runtime use, for ``num_envs`` environments, zeroed.

    Args:
        spec: the game's spec.
        params: an instance of ``spec.params_cls``.
        num_envs: number of environments.
        xp: array module (``numpy`` or ``cupy``).

    Returns:
        dict name -> array; I/O buffers, episode counters, stat sums and the game's state.
    """
    obs_shape = tuple(spec.obs_shape(params))
    shapes = {
        "obs": (obs_shape, spec.obs_dtype),  # (N, *obs_shape) observation after the step
        "final_obs": (obs_shape, spec.obs_dtype),  # (N, *obs_shape) last obs of ended episodes
        "actions": ((), np.int64),  # (N,) action per env, in [0, num_actions)
        "rewards": ((), np.float32),  # (N,) reward of the last step
        "terminated": ((), np.bool_),  # (N,) the MDP ended (death, win)
        "truncated": ((), np.bool_),  # (N,) a time limit cut the episode
        "rng": ((), np.uint64),  # (N,) xorshift64 state per env
        "score": ((), np.float32),  # (N,) game score of the running episode
        "ep_return": ((), np.float64),  # (N,) return of the running episode
        "ep_length": ((), np.int32),  # (N,) steps of the running episode
    }
    shapes.update({name: ((), dtype) for name, dtype in _STAT_SUMS.items()})
    for field in spec.state:
        shapes[field.name] = (tuple(field.shape(params)), field.dtype)
    return {name: xp.zeros((num_envs, *shape), dtype=dt) for name, (shape, dt) in shapes.items()}


def _words(flat):
    """``flat`` (rows contiguous) viewed as uint64 words when its row size allows it."""
    if flat.dtype.itemsize * flat.shape[1] % 8 == 0 and flat.flags.c_contiguous:
        return flat.view(np.uint64)
    return flat


class KernelEnv:
    """Preallocated buffers and compiled launchers for ``num_envs`` copies of one game."""

    def __init__(self, spec: GameSpec, num_envs: int, backend: str, params, seed: int = 0):
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool):
            raise TypeError(f"num_envs must be an int, got {type(num_envs).__name__}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.spec = spec
        self.params = params
        self.num_envs = int(num_envs)
        self.backend = get_backend(backend)
        self.xp = self.backend.xp
        self.arrays = allocate(spec, params, self.num_envs, self.xp)
        self.launchers = self.backend.compile(spec)
        self.seed = seed
        # cudaStream_t the cuda backend launches on and orders its array work on (0: the legacy
        # default stream, which torch and CuPy also use unless told otherwise); fasttrain.VecEnv
        # sets it to torch's current stream
        self.stream = 0
        self._step_names, self._reset_names = launcher_args(spec)
        self._values = {**spec.param_values(params), "num_actions": spec.num_actions}
        self._step_args = self.step_args(self.arrays["obs"])
        obs_flat = self.arrays["obs"].reshape(self.num_envs, -1)
        # launcher arguments of ``reset`` (on cuda: device arrays), built once
        self.reset_args = self.backend.prepare_args(
            self._args(self._reset_names, {"obs_flat": obs_flat})
        )

    def _args(self, names, overrides):
        source = {**self.arrays, **self._values, **overrides}
        return tuple(source[name] for name in names)

    def step_args(self, obs, final_obs=None) -> tuple:
        """Launcher arguments writing observations into ``obs`` and, for rows whose episode
        ends, final observations into ``final_obs`` (default: the env's own buffers).

        Build them once per pair of buffers and pass them to every ``step``: on cuda this
        converts each array to a device array, which is too slow to do per step."""
        final_obs = self.arrays["final_obs"] if final_obs is None else final_obs
        flat = obs.reshape(self.num_envs, -1)
        views = {
            "obs": obs,
            "obs_flat": flat,
            # final_obs is copied word by word: LLVM cannot vectorise a byte copy between
            # buffers that may alias, and this copy runs on every episode end
            "obs_words": _words(flat),
            "final_obs_words": _words(final_obs.reshape(self.num_envs, -1)),
        }
        return self.backend.prepare_args(self._args(self._step_names, views))

    @property
    def state(self) -> dict:
        """The game's state arrays by name (writable backend arrays)."""
        return {f.name: self.arrays[f.name] for f in self.spec.state}

    def reset(self, seed: int | None = None):
        """Reset every environment; reseed the per-env streams when ``seed`` is given."""
        with self.backend.on_stream(self.stream):
            if seed is not None:
                self.seed = seed
                self.arrays["rng"][...] = self.xp.asarray(seed_streams(seed, self.num_envs))
            for name in _STAT_SUMS:
                self.arrays[name][...] = 0
        self.backend.launch_reset(self.launchers, self.reset_args, self.num_envs, self.stream)
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
                bad = self.xp.flatnonzero((actions < 0) | (actions >= self.spec.num_actions))
                if bad.size:
                    return int(bad[0])
        return self.backend.launch_step(
            self.launchers, args or self._step_args, self.num_envs, self.stream
        )

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
        return {name: np.array(self.backend.to_host(a)) for name, a in self.arrays.items()}

    def load_state_dict(self, arrays: dict) -> None:
        """Copy ``state_dict()`` output back in; every array is checked before any is written."""
        for name, value in arrays.items():
            mine = self.arrays.get(name)
            if mine is None or tuple(mine.shape) != tuple(np.shape(value)):
                raise ValueError(f"environment array {name!r} does not fit this env")
            dtype = np.asarray(value).dtype
            if dtype != mine.dtype:
                raise ValueError(
                    f"environment array {name!r} has dtype {dtype}, this env uses {mine.dtype}"
                )
        with self.backend.on_stream(self.stream):
            for name, value in arrays.items():
                self.arrays[name][...] = self.xp.asarray(value)

    def render(self, i: int = 0) -> str:
        """Text picture of environment ``i``."""
        if not 0 <= i < self.num_envs:
            raise IndexError(f"env index {i} out of range [0, {self.num_envs})")
        host = {f.name: self.backend.to_host(self.arrays[f.name][i]) for f in self.spec.state}
        return self.spec.render_text(host, self.params)


def speed_check(spec: GameSpec, params, argv=()) -> float:
    """A game's ``__main__``: env-steps/s on the cpu backend, random actions made beforehand.

    ``argv``: optional ``[num_envs [num_steps]]`` (default 4096 envs, 2000 steps).
    """
    import time

    num_envs = int(argv[0]) if len(argv) > 0 else 4096
    num_steps = int(argv[1]) if len(argv) > 1 else 2000
    env = KernelEnv(spec, num_envs, "cpu", params)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, spec.num_actions, (num_steps, num_envs), dtype=np.int64)
    env.step()  # compile (or load from cache) outside the timing
    start = time.perf_counter()
    for t in range(num_steps):
        env.arrays["actions"][:] = actions[t]
        env.step()
    rate = num_envs * num_steps / (time.perf_counter() - start)
    print(f"{spec.name} cpu: {rate:,.0f} env-steps/s ({num_envs} envs)")
    return rate

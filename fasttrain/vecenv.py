"""The VecEnv runtime: torch views over a KernelEnv's buffers, and ``fasttrain.make``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from fasttrain import games
from fasttrain.device import resolve_device
from fasttrain.kernels import KernelEnv, resolve_backend
from fasttrain.kernels.rng import check_seeds

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
# outputs bound for ``step(obs_out=...)`` callers, most recent kept; each entry keeps its
# tensors alive, so a caller passing a fresh tensor per step must not grow memory
_CACHED_OUTPUTS = 8


def to_torch(array) -> torch.Tensor:
    """A torch tensor sharing memory with a backend array (NumPy or any DLPack producer)."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    return torch.from_dlpack(array)


def _span(array) -> tuple[int, int]:
    """First and one-past-last byte address of a contiguous tensor or NumPy array."""
    if isinstance(array, torch.Tensor):
        start, size = array.data_ptr(), array.numel() * array.element_size()
    else:
        start, size = array.__array_interface__["data"][0], array.nbytes
    return start, start + size


def _cache_key(array):
    if isinstance(array, torch.Tensor):
        return (array.data_ptr(), tuple(array.shape), array.stride(), array.dtype, array.device)
    if isinstance(array, np.ndarray):
        return (_span(array)[0], array.shape, array.strides, array.dtype, array.flags.writeable)
    return (type(array), id(array))  # not an array: binding it raises


@dataclass(frozen=True, eq=False)
class StepOutputs:
    """Output buffers checked once by ``VecEnv.bind_outputs``, for ``step(out=...)``."""

    obs: torch.Tensor | np.ndarray  # (R, *obs_shape), written by every step
    final_obs: torch.Tensor | np.ndarray  # (R, *obs_shape), written where an episode ended
    rewards: torch.Tensor | np.ndarray  # (R,) float32, written by every step
    terminated: torch.Tensor | np.ndarray  # (R,) bool
    truncated: torch.Tensor | np.ndarray  # (R,) bool
    kernel_env: KernelEnv = field(repr=False)  # the env these were bound for
    # [params_version, step launcher arguments writing into the two]: refreshed by VecEnv.step
    # after set_params changed the game's params
    launch: list = field(repr=False)

    @property
    def launch_args(self) -> tuple:
        return self.launch[1]

    def __repr__(self):
        return f"StepOutputs(obs={_describe(self.obs)}, final_obs={_describe(self.final_obs)})"


class _Closed:
    """What a closed VecEnv holds in place of its kernel env: any use says so in one line."""

    def __getattr__(self, name):
        raise RuntimeError("this environment is closed; make a new one with fasttrain.make")


def _describe(array) -> str:
    kind = "tensor" if isinstance(array, torch.Tensor) else "array"
    return f"{array.dtype} {kind} {tuple(array.shape)}"


class VecEnv:
    """``num_envs`` copies of one game stepping in place; every buffer is a zero-copy torch view.

    Per-agent buffers have ``num_rows = num_envs * num_agents`` rows (one per agent; a
    single-agent game has one per environment).

    ``step`` writes observations into ``env.obs`` or, with ``obs_out`` or ``out`` (from
    ``bind_outputs``), straight into a tensor the learner owns (a slot of its rollout storage),
    so no copy is ever made.
    """

    def __init__(self, core: KernelEnv):
        self._core = core
        spec = core.spec
        self.game = spec.name
        self.params = core.params
        self.num_envs = core.num_envs
        self.num_agents = core.num_agents  # agents per environment
        # rows of every per-agent buffer (obs, actions, rewards, ...): num_envs * num_agents,
        # the agents of environment i in rows i * num_agents ... (i + 1) * num_agents - 1
        self.num_rows = core.num_rows
        self.num_actions = core.num_actions  # fixed: set_params refuses to change it
        self.action_repeat = core.action_repeat  # game steps per step() (see make)
        self.obs_shape = tuple(spec.obs_shape(core.params))
        self.backend = core.backend.name
        views = {name: to_torch(core.arrays[name]) for name in self._VIEWS}
        self.obs = views["obs"]  # (R, *obs_shape), R = num_rows
        self.actions = views["actions"]  # (R,) int64
        self.rewards = views["rewards"]  # (R,) float32
        self.terminated = views["terminated"]  # (R,) bool
        self.truncated = views["truncated"]  # (R,) bool
        self.final_obs = views["final_obs"]  # (R, *obs_shape), valid where an episode ended
        self.obs_dtype = self.obs.dtype
        self.device = self.obs.device
        self._on_gpu = self.device.type == "cuda"
        self._out_cache: OrderedDict[tuple, StepOutputs] = OrderedDict()  # least recent first

    _VIEWS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")

    @property
    def spec(self):
        """The game's ``GameSpec``."""
        return self._core.spec

    @property
    def seed(self) -> int | tuple[int, ...]:
        """The seed the envs were last seeded with: an int, or a population's tuple (see make)."""
        return self._core.seed

    @property
    def params_version(self) -> int:
        """Counts ``set_params`` calls: the launch values bound into kernel arguments (and into
        a captured CUDA graph) change with it."""
        return self._core.params_version

    @property
    def state(self) -> dict:
        """The game's state arrays by name (writable backend arrays)."""
        return self._core.state

    @property
    def arrays(self) -> dict:
        """Every kernel buffer by name (I/O, episode counters, stat sums, state): the backend
        arrays (NumPy or CuPy) the torch views share memory with."""
        return self._core.arrays

    @property
    def stream(self) -> int:
        """The raw ``cudaStream_t`` the kernels last launched on (0 on the host backends)."""
        return self._core.stream

    @property
    def nbytes(self) -> int:
        """Bytes held by the kernel buffers (on the GPU for the cuda backend)."""
        return sum(a.nbytes for a in self._core.arrays.values())

    def to_host(self, array):
        """``array`` (one of ``arrays``) as a NumPy array: itself on the host backends."""
        return self._core.backend.to_host(array)

    def synchronize(self) -> None:
        """Wait for every launched kernel (a no-op on the host backends)."""
        self._core.backend.synchronize()

    def close(self) -> None:
        """Let go of the compiled kernels and bound outputs; stepping, resetting or reading the
        state afterwards raises ``RuntimeError`` in one line (closing twice is fine). The
        views already taken (``env.obs`` ...) keep their last values."""
        self._core = _Closed()
        self._out_cache.clear()

    def state_dict(self) -> dict:
        """Host copies of every buffer, enough to continue bit for bit."""
        return self._core.state_dict()

    def load_state_dict(self, arrays: dict) -> None:
        """Restore ``state_dict()`` output; raises ValueError (changing nothing) on a misfit."""
        self.follow_torch_stream()
        self._core.load_state_dict(arrays)

    def reset(self, seed=None) -> torch.Tensor:
        """Reset every env (reseeding per-env streams when ``seed`` is given); returns ``obs``.

        A sequence of M seeds makes a population (see ``make``)."""
        self.follow_torch_stream()
        self._core.reset(seed)  # checks the seed before changing anything
        return self.obs

    def step(
        self,
        actions=None,
        obs_out=None,
        final_obs_out=None,
        check: bool = True,
        out: StepOutputs | None = None,
    ):
        """Step every env; ``actions`` (num_rows,) integers in ``[0, num_actions)``.

        With ``actions=None`` the actions already in ``env.actions`` are used. ``obs_out`` and
        ``final_obs_out`` redirect the observations (and, for rows whose episode ended, the final
        observations) into tensors the caller owns, e.g. slots of a rollout buffer; ``out``
        does the same with buffers bound once by ``bind_outputs`` (the fast way for a caller
        stepping into many slots). ``check=False`` skips the range check that costs a host
        sync on cuda (the CPU backends check inside the kernel for free). Returns
        ``(obs, rewards, terminated, truncated)``, views of the kernel buffers or of ``out``'s.
        """
        if out is not None:
            if obs_out is not None or final_obs_out is not None:
                raise ValueError("pass either out or obs_out/final_obs_out to step, not both")
            if not isinstance(out, StepOutputs):
                raise TypeError(
                    f"out must be a StepOutputs from env.bind_outputs, got {type(out).__name__}"
                )
            if out.kernel_env is not self._core:
                raise ValueError(
                    "out was bound by another env; bind it with this env's bind_outputs"
                )
        elif obs_out is not None or final_obs_out is not None:
            out = self._cached_outputs(obs_out, final_obs_out)
        if out is not None and out.launch[0] != self._core.params_version:
            out.launch[:] = [self._core.params_version, self._core.refresh_args(out.launch[1])]
        self.follow_torch_stream()
        if actions is not None and actions is not self.actions:
            self._load_actions(actions)
        bad = self._core.step(None if out is None else out.launch_args, check)
        if bad >= 0:
            where = f"env {bad}" if self.num_agents == 1 else f"row {bad}"
            raise ValueError(
                f"action {int(self.actions[bad])} for {where} is out of range: "
                f"game {self.game!r} takes actions 0..{self.num_actions - 1}; no env was stepped"
            )
        if out is None:
            return self.obs, self.rewards, self.terminated, self.truncated
        return out.obs, out.rewards, out.terminated, out.truncated

    def bind_outputs(
        self,
        obs_out=None,
        final_obs_out=None,
        rewards_out=None,
        terminated_out=None,
        truncated_out=None,
    ) -> StepOutputs:
        """Check and bind output buffers once, for ``step(actions, out=...)``.

        ``obs_out`` and ``final_obs_out`` (default: the env's ``obs`` and ``final_obs``) are
        contiguous ``(num_rows, *obs_shape)`` tensors of ``obs_dtype`` on ``device``;
        ``rewards_out``, ``terminated_out`` and ``truncated_out`` (default: the env's own) are
        ``(num_rows,)`` float32 and bool tensors the step writes instead (a learner's rollout
        slot: nothing is copied after the step). No two may overlap; on the host backends NumPy
        arrays work too. Raises ``TypeError`` or ``ValueError`` in one line otherwise.
        """
        given = {
            "obs": obs_out,
            "final_obs": final_obs_out,
            "rewards": rewards_out,
            "terminated": terminated_out,
            "truncated": truncated_out,
        }
        buffers = {k: getattr(self, k) if v is None else v for k, v in given.items()}
        arrays = {k: self._backend_array(a, f"{k}_out", k) for k, a in buffers.items()}
        spans = sorted((*_span(a), k) for k, a in buffers.items())
        reach, first = spans[0][1], spans[0][2]
        for start, end, second in spans[1:]:
            if start < reach:
                raise ValueError(
                    f"{first}_out and {second}_out overlap in memory (the env's own buffers "
                    "when not given); pass separate buffers"
                )
            if end > reach:
                reach, first = end, second
        launch = [self._core.params_version, self._core.step_args(**arrays)]
        return StepOutputs(*buffers.values(), self._core, launch)

    def _cached_outputs(self, obs_out, final_obs_out) -> StepOutputs:
        """``bind_outputs`` for ``step(obs_out=...)``, remembered for the last few buffers."""
        key = (
            None if obs_out is None else _cache_key(obs_out),
            None if final_obs_out is None else _cache_key(final_obs_out),
        )
        outputs = self._out_cache.get(key)
        if outputs is None:
            outputs = self.bind_outputs(obs_out, final_obs_out)
            if len(self._out_cache) >= _CACHED_OUTPUTS:
                self._out_cache.popitem(last=False)
            self._out_cache[key] = outputs
        else:
            self._out_cache.move_to_end(key)
        return outputs

    def follow_torch_stream(self):
        """Launch kernels on torch's current stream, so they are ordered with the learner's
        work (a policy forward, a copy into ``actions``) with no host synchronisation; the
        env's own array work (``stats``, ``state_dict``) follows it too. Every step does this;
        a caller that replayed captured steps (a CUDA graph, which runs no Python) calls it."""
        if self._on_gpu:
            self._core.stream = torch.cuda.current_stream(self.device).cuda_stream

    def _load_actions(self, actions):
        expected = (self.num_rows,)
        if isinstance(actions, torch.Tensor):
            if actions.dtype not in _INT_DTYPES:
                raise TypeError(f"actions must be an integer tensor, got dtype {actions.dtype}")
            if actions.device.type not in ("cpu", self.device.type):  # meta holds no values
                where = "the CPU" if self.device.type == "cpu" else f"{self.device} or the CPU"
                raise ValueError(f"actions must be on {where}, not {actions.device}")
            shape = tuple(actions.shape)
        elif isinstance(actions, np.ndarray):
            if actions.dtype.kind not in "iu":
                raise TypeError(f"actions must be an integer array, got dtype {actions.dtype}")
            shape = actions.shape
        else:
            raise TypeError(
                f"actions must be a torch.Tensor or numpy.ndarray of integers with shape "
                f"{expected}, got {type(actions).__name__}"
            )
        if shape != expected:
            raise ValueError(f"actions must have shape {expected}, got {shape}")
        if isinstance(actions, np.ndarray):
            if actions.dtype == np.uint64 and actions.max(initial=0) >= 2**63:
                raise ValueError(f"actions must be in 0..{self.num_actions - 1}")
            if self._core.xp is np:
                np.copyto(self._core.arrays["actions"], actions, casting="unsafe")
            else:  # a device buffer: copy through torch (host to device)
                self.actions.copy_(torch.from_numpy(actions.astype(np.int64, copy=False)))
        else:
            self.actions.copy_(actions)

    def _backend_array(self, array, name, like: str = "obs"):
        """``array`` checked as an output buffer shaped and typed as the env's ``like`` buffer
        (``obs``, ``rewards``, ``terminated``...), as the backend's array sharing its memory."""
        own = getattr(self, like)
        expected, host = tuple(own.shape), self.device.type == "cpu"
        if isinstance(array, np.ndarray) and host:
            dtype = self._core.arrays[like].dtype
            if array.shape != expected or array.dtype != dtype:
                raise ValueError(
                    f"{name} must be a {dtype} array of shape {expected}, "
                    f"got {array.dtype} {array.shape}"
                )
            if not array.flags.c_contiguous or not array.flags.writeable:
                raise ValueError(f"{name} must be a writable C-contiguous array")
            return array
        if not isinstance(array, torch.Tensor):
            also = " or numpy.ndarray" if host else f" on {self.device}"
            raise TypeError(f"{name} must be a torch.Tensor{also}, got {type(array).__name__}")
        if tuple(array.shape) != expected or array.dtype != own.dtype:
            raise ValueError(
                f"{name} must be a {own.dtype} tensor of shape {expected}, "
                f"got {array.dtype} {tuple(array.shape)}"
            )
        if array.device != self.device or not array.is_contiguous():
            raise ValueError(f"{name} must be contiguous on {self.device}")
        if host:
            return array.detach().numpy()
        return self._core.xp.from_dlpack(array)

    def set_params(self, **overrides) -> None:
        """Change game params between steps (a curriculum stage), with no recompilation and no
        reallocation; a param that sets buffer shapes (a board size, the agents, the actions, a
        maximum) raises ``ValueError`` in one line and nothing changes."""
        params = self.spec.make_params(**{**vars(self.params), **overrides})
        self._core.set_params(params)
        self.params = params

    def stats(self) -> dict:
        """Means of ``return``, ``length``, ``score`` over episodes ended since the last call
        (agent episodes, for games with several agents per environment)."""
        self.follow_torch_stream()
        return self._core.stats()

    def render(self, i: int = 0) -> str:
        """Text picture of environment ``i``."""
        return self._core.render(i)

    def render_rgb(self, i: int = 0):
        """Colour picture of environment ``i``: a uint8 NumPy array ``(H, W, 3)``; games
        without colour rendering raise ``ValueError``."""
        self.follow_torch_stream()
        return self._core.render_rgb(i)

    def __repr__(self):
        return (
            f"VecEnv({self.game!r}, num_envs={self.num_envs}, num_agents={self.num_agents}, "
            f"backend={self.backend!r}, "
            f"obs_shape={self.obs_shape}, num_actions={self.num_actions})"
        )


def make(
    game: str,
    num_envs: int = 4096,
    backend: str = "cpu",
    seed: int | Sequence[int] = 0,
    *,
    action_repeat: int = 1,
    **game_params,
) -> VecEnv:
    """Create ``num_envs`` environments of ``game`` on ``backend``, reset with ``seed``.

    A game with several agents per environment gives ``num_envs * num_agents`` rows.

    ``backend`` is ``python`` (uncompiled reference), ``cpu``, ``cuda`` or ``auto``; extra
    keyword arguments set fields of the game's params (e.g. ``height=8``). ``action_repeat = k``
    makes each ``step`` play the game up to k times with the same actions inside the one launch,
    returning the summed reward and stopping at the episode's end (single-agent games).

    ``seed`` is one int in ``[0, 2**64)``, or a population's seeds: a sequence of M such ints
    (M dividing ``num_envs``) puts M members' environments in one buffer, environments
    ``k * n ... (k + 1) * n - 1`` (``n = num_envs // M``; their rows, in an agent game) seeded
    and stepping exactly as ``make(game, n, seed=seed[k])``'s for the same actions.
    """
    spec = games.get(game)
    params = spec.make_params(**game_params)
    check_seeds(seed)  # before a GPU probe for "auto"; KernelEnv checks it again, cheaply
    backend = resolve_device("auto").backend if backend == "auto" else resolve_backend(backend)
    core = KernelEnv(spec, num_envs, backend, params, seed, action_repeat)
    env = VecEnv(core)
    env.reset(seed)
    return env

"""What every learner's trainer runs on: the run context (device, threads, seeds, environments,
precision, one autocast), memory checks, phase timers and small helpers. The trainer protocol is
``learners/base.py``; optimizers and the optimizer step are in ``learners/optim.py``."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import torch

from fasttrain.device import Device, resolve_amp, resolve_device
from fasttrain.errors import ConfigError
from fasttrain.learners import distributed
from fasttrain.learners.compile import wait_for_background_compiles
from fasttrain.learners.optim import optimizer_step
from fasttrain.learners.ranks import SINGLE, Ranks
from fasttrain.vecenv import VecEnv, make

# Below this many multiply-adds per rollout step (rows x weights) one torch and one Numba thread
# train fastest: the operations are too small to split (measurements: docs/performance.md#threads)
SMALL_STEP_WORK = 500_000


def setup_threads(run, processes: int = 1, step_work: int | None = None) -> None:
    """Set torch and Numba thread counts and GPU math modes. ``0`` in the config means one per
    core, shared out between the ``processes`` ranks on this machine, or one thread where
    ``step_work`` (multiply-adds of a rollout step's forward pass) is below
    ``SMALL_STEP_WORK``."""
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, cores // processes)
    if step_work is not None and step_work < SMALL_STEP_WORK:
        cores = 1
    torch.set_num_threads(run.torch_threads or cores)
    numba.set_num_threads(min(run.numba_threads or cores, numba.config.NUMBA_NUM_THREADS))
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


@contextlib.contextmanager
def one_torch_thread():
    """Initialise a network on one torch thread: orthogonal initialisation (a QR decomposition)
    rounds differently on different thread counts, and a run's count is set only once its
    network is known (``TrainerBase.fit_threads``), so the same seed starts from the same
    weights whatever the threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def warn_once(warn):
    """``warn`` that prints only its first message (one compile warning per run)."""
    said = []

    def once(message: str) -> None:
        if not said:
            said.append(message)
            warn(message)

    return once


@dataclass
class Timers:
    """Seconds spent per phase since the last ``reset``."""

    env: float = 0.0
    forward: float = 0.0
    learn: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def split(self) -> dict:
        """Fraction of the wall time per phase, ``other`` being the rest."""
        total = max(time.perf_counter() - self.start, 1e-9)
        parts = {"env": self.env, "forward": self.forward, "learn": self.learn}
        parts["other"] = max(total - sum(parts.values()), 0.0)
        return {k: v / total for k, v in parts.items()}

    def reset(self):
        self.env = self.forward = self.learn = 0.0
        self.start = time.perf_counter()


@dataclass
class RunContext:
    """What a learner runs on: the device, its sampling generator, the envs and the precision."""

    device: Device
    generator: torch.Generator  # the learner's sampling stream (actions, minibatches, replay)
    env: VecEnv
    amp_dtype: torch.dtype | None  # autocast dtype of the update, None for float32
    scaler: torch.amp.GradScaler | None  # fp16 only
    ranks: Ranks = SINGLE  # data-parallel ranks (torchrun)
    masked_steps: bool = False  # undo non-finite steps on the device (always on a GPU)
    comm_s: float = 0.0  # seconds spent in the gradient all-reduce
    updates: int = 0  # optimizer steps asked for
    skipped: torch.Tensor = None  # () int64 on the device: non-finite steps not taken
    backups: dict = field(
        default_factory=dict, repr=False
    )  # id(tensor) -> copy before a masked step

    def __post_init__(self):
        if self.skipped is None:
            self.skipped = torch.zeros((), dtype=torch.int64, device=self.device.torch)

    def autocast(self):
        """The one autocast context of every learner's update (a no-op without ``run.amp``)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, self.amp_dtype)

    def optimizer_step(self, optimizer, loss, parameters, max_grad_norm: float) -> None:
        """The one optimizer step (``fasttrain.learners.optim.optimizer_step``): backward,
        clip, and a step skipped and counted in ``skipped`` where not finite."""
        optimizer_step(self, optimizer, loss, parameters, max_grad_norm)

    def take_skipped(self) -> torch.Tensor:
        """Skipped updates since the last call (a device tensor; read it with the losses)."""
        skipped = self.skipped.clone()
        self.skipped.zero_()
        return skipped


@contextlib.contextmanager
def user_sizes(what: str):
    """Turn an allocation the machine refuses (sizes a user chose) into one line."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        text = str(exc).lower()
        if not isinstance(exc, MemoryError) and "alloc" not in text and "memory" not in text:
            raise
        raise ConfigError(f"{what} does not fit in memory: {str(exc).splitlines()[0]}") from None


def start_run(config, num_envs: int, env_seed=None) -> RunContext:
    """Device, threads, seeds, the environments and precision; every check runs before work.
    ``env_seed``: the environments' seed where it is not the run's (a population's seeds, one
    per block of envs: ``fasttrain.make``)."""
    run = config.run
    device = resolve_device(run.device)
    ranks = distributed.setup(run.dist_backend, device.type, run.dist_timeout_s)
    if ranks.enabled and device.type == "cuda":  # one GPU per rank on its machine
        device = Device(torch.device("cuda", ranks.local_rank), device.backend)
    amp = resolve_amp(run.amp, device, config.model.hidden)
    setup_threads(run, ranks.local_world)
    wait_for_background_compiles()  # an earlier trainer's compile must not touch this one
    torch.manual_seed(run.seed)  # the same on every rank: identical initial weights
    # each rank's own environments and sampling stream (rank 0: the single-process run's)
    seed = distributed.rank_seed(run.seed, ranks.rank)
    generator = torch.Generator(device=device.torch).manual_seed(seed % 2**63)
    try:
        env = make(
            config.game.name,
            num_envs=num_envs,
            backend=device.backend,
            seed=seed if env_seed is None else env_seed,
            action_repeat=run.action_repeat,
            **vars(config.params),
        )
    except (ValueError, MemoryError) as exc:  # sizes the machine cannot hold, named in one line
        raise ConfigError(str(exc).splitlines()[0]) from None
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    return RunContext(device, generator, env, amp_dtype, scaler, ranks)

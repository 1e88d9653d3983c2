"""What every learner's trainer stands on: the run context (device, threads, seeds, environments,
precision, one autocast), the trainer base with the checkpoint fields they share, memory checks,
phase timers and small helpers. Optimizers and the optimizer step are in ``learners/optim.py``,
torch.compile in ``fasttrain/compile.py``."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fasttrain import distributed, savedstate
from fasttrain.compile import wait_for_background_compiles
from fasttrain.device import Device, resolve_amp, resolve_compile, resolve_device
from fasttrain.errors import ConfigError
from fasttrain.kernels.env import host_memory_available
from fasttrain.kernels.statecheck import StateError
from fasttrain.learners.optim import Optimizers, optimizer_step, set_learning_rate
from fasttrain.ranks import SINGLE, Ranks
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


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new buffers on ``device`` now (None when unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_memory_available()


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


def check_memory(
    nbytes: int, what: str, device: torch.device, fix: str = "lower num_envs or num_steps"
) -> None:
    """Refuse, in one line and before allocating, buffers that cannot fit in memory."""
    available = available_memory(device)
    if available is not None and nbytes > available:
        raise ConfigError(
            f"{what} needs {nbytes / 2**30:,.1f} GiB but {available / 2**30:,.1f} GiB is free on "
            f"{device.type}; {fix}"
        )


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


class TrainerBase:
    """What the runner needs of every learner's trainer, and the checkpoint fields they share.

    A subclass sets ``config``, ``args`` (its config section), ``ctx``, ``optimizer``,
    ``num_iterations`` and ``batch_size`` and implements ``iterate() -> dict`` (the losses of one
    iteration, as ``losses/...`` keys), ``state_dict`` and ``load_state_dict`` on top of these.
    """

    iteration = 0
    global_step = 0

    def __init__(self, config, num_envs: int):
        self.config = config
        self.ctx = start_run(config, num_envs)
        self.env = self.ctx.env
        # learner rows: one per agent (num_envs * num_agents); every buffer is per row
        self.rows = self.env.num_rows
        self.device = self.ctx.device.torch
        self.generator = self.ctx.generator
        self.timers = Timers()
        # data-parallel ranks: steps count every rank's, each rank steps its own envs
        self.world = self.ctx.ranks.world

    def share_weights(self, *modules) -> None:
        """Rank 0's weights on every rank (data-parallel runs; nothing otherwise)."""
        if self.ctx.ranks.enabled:
            for module in modules:
                distributed.broadcast_module(module)

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def steps_per_iteration(self) -> int:
        """Agent steps (learner rows) per iteration, over every rank."""
        return self.rows * self.args.num_steps * self.world

    def fit_threads(self, network: torch.nn.Module) -> None:
        """Thread counts for this run's size (``setup_threads``): a small network stepping few
        rows runs on one torch and one Numba thread where the config leaves them at 0."""
        weights = sum(p.numel() for p in network.parameters() if p.ndim > 1)
        setup_threads(self.config.run, self.ctx.ranks.local_world, self.env.num_rows * weights)

    def describe_rows(self) -> str:
        """``256 envs`` or, with several agents per environment, ``64 envs x 8 agents``."""
        envs = f"{self.env.num_envs} envs"
        return envs if self.env.num_agents == 1 else f"{envs} x {self.env.num_agents} agents"

    def describe(self) -> str:
        """The shape of one iteration, for the run's first log line."""
        text = f"{self.describe_rows()} x {self.args.num_steps} steps = batch {self.batch_size}"
        text = text if self.world == 1 else f"{text} per rank x {self.world} ranks"
        return text + self.compile_note()

    def compile_mode_for(self, auto_compile: bool, recurrent: bool = False) -> str:
        """``run.compile`` resolved for this run (``fasttrain.device.resolve_compile``), with
        what the learner says of compiling it (its ``Learner.auto_compile``)."""
        return resolve_compile(
            self.config.run.compile,
            self.ctx.device,
            self.args.total_timesteps,
            auto_compile,
            recurrent,
            self.config.model.hidden,
        )

    @property
    def precision(self) -> str:
        """The update's arithmetic: ``bf16`` or ``fp16`` under ``run.amp``, else ``fp32``."""
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.ctx.amp_dtype, "fp32")

    def compile_note(self) -> str:
        """`` | bf16 update`` (or fp16) under mixed precision (``run.amp``; the rollout's forward
        passes stay float32), then `` | torch.compile (MODE)`` when the learner compiles
        (``run.compile``)."""
        note = "" if self.precision == "fp32" else f" | {self.precision} update"
        mode = getattr(self, "compile_mode", "off")
        return note + ("" if mode == "off" else f" | torch.compile ({mode})")

    def base_state(self) -> dict:
        """Checkpoint fields every learner has: counters, env buffers and random streams."""
        return {
            "learner": self.config.run.algo,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "optimizer": self.optimizer.state_dict(),
            "env": self.env.state_dict(),
            "device": self.device.type,
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def check_state(self, state: dict) -> None:
        """Refuse a checkpoint of another learner or device, or one whose shared fields are
        missing or ill-typed (``fasttrain.savedstate``), with one line; changes nothing."""
        savedstate.table(state, "state")
        savedstate.check_common(state, resuming=True)
        learner = state.get("learner", self.config.run.algo)
        if learner != self.config.run.algo:
            raise ConfigError(
                f"checkpoint was written by learner {learner!r} and this run uses "
                f"{self.config.run.algo!r}; resume it with run.algo = {learner!r}"
            )
        saved = state.get("device", "cpu")
        if saved != self.device.type:
            raise ConfigError(
                f"checkpoint was written on device {saved!r} and this run is on "
                f"{self.device.type!r}; resume it with run.device = {saved!r}"
            )
        savedstate.field(state, "env", "the environments' state")  # checked by env itself
        expected = "this run's optimizer state"
        savedstate.optimizer_state(savedstate.field(state, "optimizer", expected), self.optimizer)
        generator = savedstate.field(state, "generator", "a generator state")
        savedstate.generator_state(generator, "generator", self.generator.device)
        cpu_stream = savedstate.field(state, "torch_rng", "a generator state")
        savedstate.generator_state(cpu_stream, "torch_rng", torch.device("cpu"))

    def load_base_state(self, state: dict) -> None:
        """Restore ``base_state`` fields; call ``check_state`` and learner checks first."""
        try:
            self.env.load_state_dict(state["env"])
        except StateError as exc:  # a value the game cannot produce: a damaged or crafted file
            raise ConfigError(f"checkpoint refused: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"checkpoint does not fit this run: {exc}") from None
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                "checkpoint's optimizer state does not fit this run's optimizer; resume with "
                "the optimizer it was written with"
            ) from None
        if not isinstance(self.optimizer, Optimizers):  # eager steps take a float rate, as
            for group in self.optimizer.param_groups:  # before a compiled step saved a tensor
                group["lr"] = float(group["lr"])
        self.global_step = state["global_step"]
        self.iteration = state["iteration"]
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.resume_learning_rate()

    def scheduled_learning_rate(self) -> float:
        """The rate this run's config gives the next update: ``learning_rate``, scaled by the
        share of iterations left where the learner anneals it (``anneal_lr``); a learner with
        another schedule overrides this."""
        args = self.args
        if not getattr(args, "anneal_lr", False):
            return args.learning_rate
        return (1.0 - self.iteration / self.num_iterations) * args.learning_rate

    def resume_learning_rate(self) -> None:
        """After a checkpoint's optimizer state (which holds the rate it was written with):
        the rate of this run's config at the resumed iteration, so a ``learning_rate`` or
        ``anneal_lr`` changed on --resume takes effect. A rate equal to the checkpoint's in
        float32 is left as the checkpoint held it (a float, or a tensor a compiled step
        reads): an unchanged resume continues bit for bit."""
        if self.iteration >= self.num_iterations or not hasattr(self.args, "learning_rate"):
            return  # nothing left to train, or no rate in the config to follow
        rate = self.scheduled_learning_rate()
        held = [float(group["lr"]) for group in self.optimizer.param_groups]
        if any(np.float32(h) != np.float32(rate) for h in held):
            set_learning_rate(self.optimizer, rate)

"""Training plumbing every learner shares: the run context (device, threads, seeds, environments,
precision), one autocast, one optimizer step, phase timers and the common checkpoint fields."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import torch

from fasttrain.device import Device, resolve_device
from fasttrain.errors import ConfigError
from fasttrain.vecenv import VecEnv, make


def setup_threads(run) -> None:
    """Set torch and Numba thread counts (0 means one per core) and GPU math modes."""
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(run.torch_threads or cores)
    numba.set_num_threads(min(run.numba_threads or cores, numba.config.NUMBA_NUM_THREADS))
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


def maybe_compile(module, mode: str, example: torch.Tensor, warn=print):
    """``torch.compile`` the network; on any failure warn once and return it uncompiled."""
    if mode == "off":
        return module
    try:
        compiled = torch.compile(module, mode=None if mode == "default" else mode)
        with torch.inference_mode():
            compiled(example)
        return compiled
    except Exception as exc:  # compilation needs a compiler toolchain; never fatal
        warn(f"warning: torch.compile({mode}) failed, running eagerly: {type(exc).__name__}")
        return module


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

    def autocast(self):
        """The one autocast context of every learner's update (a no-op without ``run.amp``)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, self.amp_dtype)

    def optimizer_step(self, optimizer, loss, parameters, max_grad_norm: float) -> None:
        """Zero the gradients, backpropagate ``loss``, clip to ``max_grad_norm`` and step."""
        optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
            optimizer.step()


def start_run(config, num_envs: int) -> RunContext:
    """Device, threads, seeds, the environments and precision; every check runs before work."""
    run = config.run
    device = resolve_device(run.device)
    if run.amp == "fp16" and device.type != "cuda":
        raise ConfigError("run.amp = 'fp16' needs device cuda; use 'bf16' on the CPU")
    setup_threads(run)
    torch.manual_seed(run.seed)
    generator = torch.Generator(device=device.torch).manual_seed(run.seed)
    env = make(
        config.game.name,
        num_envs=num_envs,
        backend=device.backend,
        seed=run.seed,
        **vars(config.game_params()),
    )
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.amp)
    scaler = torch.amp.GradScaler("cuda") if run.amp == "fp16" else None
    return RunContext(device, generator, env, amp_dtype, scaler)


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
        self.device = self.ctx.device.torch
        self.generator = self.ctx.generator
        self.timers = Timers()

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def describe(self) -> str:
        """The shape of one iteration, for the run's first log line."""
        args = self.args
        return f"{args.num_envs} envs x {args.num_steps} steps = batch {self.batch_size}"

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
        """Refuse a checkpoint of another learner or device with one line; changes nothing."""
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

    def load_base_state(self, state: dict) -> None:
        """Restore ``base_state`` fields; call ``check_state`` and learner checks first."""
        try:
            self.env.load_state_dict(state["env"])
        except ValueError as exc:
            raise ConfigError(f"checkpoint does not fit this run: {exc}") from None
        self.global_step = state["global_step"]
        self.iteration = state["iteration"]
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])

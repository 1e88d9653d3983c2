"""Training throughput for ``fasttrain bench``: end-to-end SPS, its time split, and the learner-only
ceiling, for any registered learner."""

from __future__ import annotations

import time

import torch

from fasttrain.config import resolve as cfg
from fasttrain.learners import LEARNERS, make_trainer
from fasttrain.learners.compile import as_if_cached


def benchmark_training(
    algo: str,
    game: str,
    device: str = "cpu",
    iterations: int = 3,
    num_envs: int | None = None,
    seed: int = 0,
    threads: int | None = None,
    core: str = "none",
    sections: dict | None = None,
) -> dict:
    """End-to-end SPS of learner ``algo`` on ``game`` with its default config, the time split
    and the learner-only ceiling (the learner's ``bench`` settings applied), and the
    ``model.core`` trained (``core``). ``core``: the ``model.core`` to train with (``"none"``:
    the default config's). ``sections``: config sections (``{"ppo": {...}, "model": {...}}``)
    laid over the default config, as a user's config file would be. A config that does not fit
    (a recurrent core's sequences against the rollout) raises ``ConfigError``."""
    learner = LEARNERS[algo]
    settings = dict(learner.bench)
    if num_envs is not None:
        settings["num_envs"] = num_envs
    overrides = {"game": {"name": game}, "run": {"algo": algo, "device": device, "seed": seed}}
    if threads:  # torch and Numba threads (0 in the config: one per core)
        overrides["run"].update(torch_threads=threads, numba_threads=threads)
    if settings:
        overrides[algo] = settings
    if core != "none":
        overrides["model"] = {"core": core}
    if sections:
        overrides = cfg.merge(overrides, sections)
    config = cfg.build([("bench", overrides)])
    with as_if_cached():  # the steady state: compiled where a warm cache would compile
        trainer = make_trainer(config, warn=lambda *_: None)
    result = measure_training(trainer, iterations, learner.ceiling)
    return {**result, "core": config.model.core}


def flops_per_step(trainer) -> float | None:
    """Floating-point operations the learner spends per environment step (the rollout's forward
    passes and the update's, backward included), counted by torch's ``FlopCounterMode`` over
    one eager iteration: its matrix products and convolutions, the learner's arithmetic. None
    where the iteration would not run eagerly (a compile due at its first call)."""
    from torch.utils.flop_counter import FlopCounterMode

    deferred = getattr(trainer, "deferred", None)
    if getattr(trainer, "compile_mode", "off") != "off" and deferred is None:
        return None
    step0 = trainer.global_step
    with FlopCounterMode(display=False) as counter:
        trainer.iterate()
    return counter.get_total_flops() / max(trainer.global_step - step0, 1)


def measure_training(trainer, iterations: int, ceiling=None) -> dict:
    """Time ``iterations`` iterations after one warm-up; the split, ``ceiling(trainer)`` and
    the learner's floating-point operations per step (``flops_per_step``)."""
    cuda = trainer.device.type == "cuda"
    flops = flops_per_step(trainer)  # eager, before the compiled steps take over
    if getattr(trainer, "deferred", None) is not None:  # the compiled steps, not eager ones
        trainer.deferred.finish()
    # warm-up: compile and allocate outside the timing (on cuda also a rollout graph's capture,
    # at the second iteration)
    for _ in range(2 if cuda else 1):
        trainer.iterate()
    trainer.timers.reset()
    if cuda:
        torch.cuda.synchronize(trainer.device)
        torch.cuda.reset_peak_memory_stats(trainer.device)
    start, step0 = time.perf_counter(), trainer.global_step
    for _ in range(iterations):
        trainer.iterate()
    if cuda:
        torch.cuda.synchronize(trainer.device)
    elapsed = time.perf_counter() - start
    split = trainer.timers.split()  # on cuda: host time per phase, a rough split
    return {
        "sps": (trainer.global_step - step0) / elapsed,
        **{f"time_{k}": v for k, v in split.items()},
        "ceiling_sps": ceiling(trainer) if ceiling else float("nan"),
        "num_envs": trainer.env.num_envs,
        "num_agents": trainer.env.num_agents,
        "batch_size": trainer.batch_size,
        "flops_per_step": flops,
        "precision": getattr(trainer, "precision", "fp32"),
        # GPU memory: the env's buffers plus torch's peak (storage, model, activations)
        "gpu_mem_bytes": trainer.env.nbytes + torch.cuda.max_memory_allocated(trainer.device)
        if cuda
        else None,
    }

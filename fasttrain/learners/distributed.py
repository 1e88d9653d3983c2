"""Data-parallel training on torch.distributed: torchrun starts the processes, fasttrain joins.

``torchrun --nproc_per_node N -m fasttrain run ...`` (or ``fasttrain run --nproc N``, which starts
torchrun itself) runs N ranks of the same run. What each rank does, learned from CleanRL's
multi-GPU PPO (and from the seeding bug PufferLib 3.0 and rl_games had):

- its own environments, seeded with ``rank_seed(seed, rank)`` (rank 0 keeps ``seed``, so one
  rank is exactly the single-process run), and its own sampling stream;
- identical networks: every rank seeds torch with ``seed`` before building them, then rank 0's
  weights are broadcast;
- one flat all-reduce of the gradients (and the loss, so the non-finite guard agrees) per
  optimizer step, then the same clip and step everywhere, so weights and optimizer state stay
  identical;
- ``global_step`` counts every rank's steps; SPS is the sum over ranks; episode statistics are
  averaged over every rank's episodes (``episode_stats``);
- rank 0 alone writes the run directory and prints; a checkpoint holds every rank's state
  (gathered to rank 0), and a resume scatters them back, so it continues bit for bit with the
  same number of ranks;
- signals are agreed on at each iteration boundary (``agree``), so every rank stops at the same
  iteration; collectives time out after ``run.dist_timeout_s`` instead of hanging.

``gloo`` on the CPU, ``nccl`` on CUDA (``run.dist_backend = "auto"``).
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time

import numpy as np
import torch

# where this process stands, read without torch (the CLI refuses a bad command before torch)
from fasttrain.learners.ranks import SINGLE, Ranks, launched

_current = SINGLE
_owned = False  # this module started the process group (and so may end it)


def current() -> Ranks:
    """This process's ranks once ``setup`` ran (one process before, or without torchrun)."""
    return _current


def setup(backend: str, device_type: str, timeout_s: float) -> Ranks:
    """Join the process group torchrun describes (once); returns this process's ranks."""
    global _current, _owned
    ranks = launched()
    if not ranks.enabled:
        return SINGLE
    if not torch.distributed.is_initialized():
        _owned = True
        if backend == "auto":
            backend = "nccl" if device_type == "cuda" else "gloo"
        kwargs = {}
        if device_type == "cuda":
            torch.cuda.set_device(ranks.local_rank)
            kwargs["device_id"] = torch.device("cuda", ranks.local_rank)
        torch.distributed.init_process_group(
            backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs
        )
        follow_parent()
    _current = ranks
    return ranks


ORPHAN_POLL_S = 0.5  # how often a rank looks whether its launcher is still there


def follow_parent(poll_s: float = ORPHAN_POLL_S) -> threading.Thread:
    """A rank ends with its launcher: once the process that started it is gone (a scheduler
    killed torchrun with SIGKILL, which torchrun cannot pass on), the rank sends itself
    SIGTERM, so it stops at the next iteration boundary with a checkpoint like any SIGTERM."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:  # an orphan is adopted by init or a subreaper
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="fasttrain-follow-parent", daemon=True)
    thread.start()
    return thread


def rank_seed(seed: int, rank: int) -> int:
    """The environments' seed of ``rank``: ``seed`` itself on rank 0, else a 64-bit seed drawn
    from NumPy's SeedSequence of ``(seed, rank)``, so no two ranks share a stream."""
    if rank == 0:
        return int(seed)
    words = np.random.SeedSequence([int(seed) % 2**64, rank]).generate_state(2, np.uint32)
    return int(words[0]) | (int(words[1]) << 32)


def all_reduce_mean(tensors: list[torch.Tensor], world: int) -> None:
    """Average ``tensors`` over the ranks in place, in one all-reduce of their flat copy."""
    flat = torch.cat([t.reshape(-1).float() for t in tensors])
    torch.distributed.all_reduce(flat)
    flat /= world
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n


def broadcast_module(module: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank."""
    for tensor in [*module.parameters(), *module.buffers()]:
        torch.distributed.broadcast(tensor.data, src=0)


def episode_stats(stats: dict, ranks: Ranks, device) -> dict:
    """Episode means over every rank's episodes (weighted by their counts); ``{}`` when no
    rank finished one. One rank: ``stats`` as it is."""
    if not ranks.enabled:
        return stats
    keys = ("return", "length", "score")
    count = float(stats.get("episodes", 0))
    local = [count] + [float(stats[k]) * count if count else 0.0 for k in keys]
    total = torch.tensor(local, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(total)
    episodes = total[0].item()
    if episodes == 0:
        return {}
    means = (total[1:] / episodes).tolist()
    return {"episodes": int(episodes), **dict(zip(keys, means, strict=True))}


def agree(flag: int, ranks: Ranks, device) -> int:
    """The largest ``flag`` of every rank (a signal number, or 0): all ranks stop together."""
    if not ranks.enabled:
        return flag
    value = torch.tensor([flag], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return int(value.item())


def gather_states(state: dict, ranks: Ranks) -> list[dict] | None:
    """Every rank's ``state`` on rank 0 (in rank order); None on the other ranks."""
    if not ranks.enabled:
        return [state]
    out = [None] * ranks.world if ranks.main else None
    torch.distributed.gather_object(_to_cpu(state), out, dst=0)
    return out


def _to_cpu(value):
    """``value`` with every tensor (in dicts, lists and tuples) on the CPU, for pickling."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def scatter_states(states: list[dict] | None, ranks: Ranks) -> dict:
    """Rank 0's list of per-rank states sent out: each rank receives its own."""
    if not ranks.enabled:
        return states[0]
    received = [None]
    torch.distributed.scatter_object_list(received, states if ranks.main else None, src=0)
    return received[0]


def broadcast_object(value, ranks: Ranks):
    """Rank 0's ``value`` on every rank."""
    if not ranks.enabled:
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def shutdown() -> None:
    """End the process group ``setup`` started (one the caller started is left alone)."""
    global _current, _owned
    if _owned and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    _current, _owned = SINGLE, False

"""The one device rule: ``run.device`` (or ``--device``) to a torch device and a kernel backend.

Learners, ``fasttrain.make(backend="auto")`` and ``fasttrain bench`` call ``resolve_device``;
nothing else decides what ``auto`` means.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fasttrain.errors import ConfigError
from fasttrain.kernels import cuda_available
from fasttrain.kernels.device import cuda_problem, simulator

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Device:
    """Where a run's environments and learner live."""

    torch: torch.device  # the learner's tensors
    backend: str  # the environments' kernel backend: "cpu" or "cuda"

    @property
    def type(self) -> str:
        return self.torch.type


def resolve_device(name: str) -> Device:
    """``auto`` → cuda when a GPU serves both kernels and torch, else cpu; ``cuda`` without a
    usable GPU fails with one line naming what is missing."""
    if name not in DEVICES:
        raise ConfigError(f"unknown device {name!r}; valid: {', '.join(DEVICES)}")
    if name == "auto":
        name = "cuda" if cuda_available() and torch.cuda.is_available() else "cpu"
    if name == "cuda":
        problem = cuda_problem()
        if problem is None and simulator():
            problem = "the CUDA simulator runs environments only; the learner needs a real GPU"
        elif problem is None and not torch.cuda.is_available():
            problem = "torch was built without CUDA; install a CUDA build of torch"
        if problem:
            raise ConfigError(f"device 'cuda' is not available: {problem}")
    return Device(torch.device(name), name)

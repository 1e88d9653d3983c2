"""fasttrain.kernels: backends, allocation, RNG, launch builders and learner kernels.

Never imports torch: any DLPack consumer (NumPy, CuPy, JAX, torch) can use these arrays.
"""

import os

# OpenMP threads that spin while they wait turn a busy machine into a 20-40x slowdown: each
# parallel step then waits a whole scheduler slice for a preempted sibling (measured on 2 cores
# with one competing process: 1.7M env-steps/s spinning, 22M passive). Set before Numba or torch
# load libgomp; an explicit user setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .backends import BACKENDS, cuda_available, get_backend, resolve_backend
from .env import KernelEnv, allocate
from .rng import rand_float, rand_int, seed_streams, splitmix64
from .spec import IO_BUFFERS, Field, GameSpec

__all__ = [
    "BACKENDS", "IO_BUFFERS", "Field", "GameSpec", "KernelEnv", "allocate", "cuda_available",
    "get_backend", "rand_float", "rand_int", "resolve_backend", "seed_streams", "splitmix64",
]  # fmt: skip

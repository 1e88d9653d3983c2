"""fasttrain.kernels: backends, allocation, RNG, launch builders, learner kernels, checkers.

Never imports torch: any DLPack consumer (NumPy, CuPy, JAX, torch) can use these arrays.

``FASTTRAIN_CHECKED_KERNELS=1`` in the environment compiles the cpu backend's games with Numba's
bounds checks: an index outside an array raises ``backends.OutOfBoundsError`` naming the game
instead of touching memory the arrays do not own (for tests and fuzzing; see ``backends``).
"""

import os

# OpenMP threads that spin long while they wait turn a busy machine into a 20-40x slowdown: each
# parallel step waits a whole scheduler slice for a preempted sibling. A short spin keeps the
# quiet-machine speed. Snake, 4096 envs, 2 cores, env-steps/s (quiet / one competing process):
# libgomp default 44.7M / 1.8M, passive 30M / 23M, spin 1000 44.3M / 18.6M. Set before Numba or
# torch load libgomp; an explicit user setting of either variable wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "1000"  # libgomp: spin this long, then sleep

from .backends import BACKENDS, cuda_available, get_backend, resolve_backend
from .columns import ColumnKernel
from .env import KernelEnv, allocate, speed_check
from .rng import rand_float, rand_int, seed_streams, splitmix64
from .spec import IO_BUFFERS, Field, GameSpec
from .testing import assert_backends_agree

__all__ = [
    "BACKENDS",
    "IO_BUFFERS",
    "ColumnKernel",
    "Field",
    "GameSpec",
    "KernelEnv",
    "allocate",
    "assert_backends_agree",
    "cuda_available",
    "get_backend",
    "rand_float",
    "rand_int",
    "resolve_backend",
    "seed_streams",
    "speed_check",
    "splitmix64",
]

"""fasttrain.kernels: backends, allocation, RNG, launch builders, learner kernels, checkers.

Never imports torch: any DLPack consumer (NumPy, CuPy, JAX, torch) can use these arrays.

``FASTTRAIN_CHECKED_KERNELS=1`` in the environment compiles the cpu backend's games with Numba's
bounds checks: an index outside an array raises ``backends.OutOfBoundsError`` naming the game
instead of touching memory the arrays do not own (for tests and fuzzing; see ``backends``).
"""

# OpenMP's wait policy is set by ``fasttrain/__init__.py``, which runs before this package and
# before torch or Numba load libgomp, so the learner and the kernels share it.
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

"""fasttrain.kernels: backends, allocation, RNG, launch builders and learner kernels.

Never imports torch: any DLPack consumer (NumPy, CuPy, JAX, torch) can use these arrays.
"""

from .backends import BACKENDS, cuda_available, get_backend, resolve_backend
from .env import KernelEnv, allocate
from .rng import rand_float, rand_int, seed_streams, splitmix64
from .spec import IO_BUFFERS, Field, GameSpec

__all__ = [
    "BACKENDS", "IO_BUFFERS", "Field", "GameSpec", "KernelEnv", "allocate", "cuda_available",
    "get_backend", "rand_float", "rand_int", "resolve_backend", "seed_streams", "splitmix64",
]  # fmt: skip

"""fasttrain: games compiled by Numba for CPU and GPU, and a lean PyTorch learner.

>>> import fasttrain
>>> env = fasttrain.make("snake", num_envs=1024, backend="cpu", seed=0)
>>> obs, reward, terminated, truncated = env.step(actions)

``make``, ``VecEnv`` and ``games`` load on first use, so ``fasttrain --help`` and a Ctrl-C at
start-up stay quick and clean (torch and Numba take seconds to import).
"""

import importlib

__version__ = "0.1.0"
__all__ = ["VecEnv", "games", "make", "__version__"]
_LAZY = {"make": "fasttrain.vecenv", "VecEnv": "fasttrain.vecenv", "games": "fasttrain.games"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'fasttrain' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "games" else getattr(module, name)
    globals()[name] = value
    return value

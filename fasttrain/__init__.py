"""fasttrain: games compiled by Numba for CPU and GPU, and a lean PyTorch learner.

>>> import fasttrain
>>> env = fasttrain.make("snake", num_envs=1024, backend="cpu", seed=0)
>>> obs, reward, terminated, truncated = env.step(actions)
"""

from fasttrain import games
from fasttrain.vecenv import VecEnv, make

__version__ = "0.1.0"
__all__ = ["VecEnv", "games", "make", "__version__"]

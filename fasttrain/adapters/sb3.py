"""Stable-Baselines3 adapter: any fasttrain game as an SB3 ``VecEnv``.

>>> from stable_baselines3 import PPO
>>> from stable_baselines3.common.vec_env import VecMonitor
>>> from fasttrain.adapters.sb3 import make_vec_env
>>> venv = VecMonitor(make_vec_env("cartpole", num_envs=8, seed=0))
>>> PPO("MlpPolicy", venv).learn(10_000)

Semantics are those of SB3's ``DummyVecEnv``: ``dones = terminated | truncated``; finished envs
restart inside the step, the returned observation is the new episode's first one, and
``infos[i]["terminal_observation"]`` holds the last observation of the finished episode;
``infos[i]["TimeLimit.truncated"]`` is ``truncated and not terminated`` (SB3 bootstraps the value
there). Wrap in ``VecMonitor`` for ``rollout/ep_rew_mean`` logging.

Observations, rewards and dones are always copies of the kernel buffers: SB3's on-policy loop
keeps the previous step's observation (``_last_obs``) and writes it to its rollout buffer only
after the next step, which overwrites the kernel buffers in place.

Games with several agents per environment (the arena): every agent is one SB3 env, as in
PufferLib, so ``venv.num_envs`` is ``num_envs * num_agents``, agent a of environment i at index
``i * num_agents + a``, each with its own episodes (an agent's lives) and
``terminal_observation``. The model is then one policy playing every agent (self-play with
shared weights). ``env_method("render", indices=...)`` gives the picture of each index's
environment. For separate policies per agent use ``fasttrain.adapters.pettingzoo``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

try:
    from gymnasium import spaces
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fasttrain.adapters.sb3 needs stable-baselines3: pip install 'fasttrain[sb3]'"
    ) from exc

import fasttrain
from fasttrain.adapters.gym import observation_space


class SB3VecEnv(VecEnv):
    """A fasttrain VecEnv's rows (one per env and agent) behind SB3's ``VecEnv`` API."""

    def __init__(self, env: fasttrain.VecEnv, seed: int | None = None):
        self.env = env
        self.render_mode = None  # read through get_attr by VecEnv.__init__
        self._to_host = env.to_host
        self._actions: np.ndarray | None = None
        super().__init__(
            env.num_rows,  # one SB3 env per agent of each environment
            observation_space(env.spec, env.params),
            spaces.Discrete(env.num_actions),
        )
        if seed is not None:
            self.seed(seed)  # the first reset() starts from `seed`, as fasttrain.make did

    def _copy(self, name: str) -> np.ndarray:
        array = self.env.arrays[name]
        out = self._to_host(array)
        return out.copy() if out is array else out

    def reset(self) -> np.ndarray:
        """Reset every env; a seed set by ``seed()`` is used once (env i streams from (seed, i))."""
        self.env.reset(self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        return self._copy("obs")

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        self.env.step(self._actions)  # checks shape, dtype and range before stepping
        self._actions = None
        obs, rewards = self._copy("obs"), self._copy("rewards")
        terminated, truncated = self._copy("terminated"), self._copy("truncated")
        dones = terminated | truncated
        time_limit = truncated & ~terminated
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]
        if dones.any():
            final = self._to_host(self.env.arrays["final_obs"])
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final[i].copy()  # the row is reused later
                infos[i]["TimeLimit.truncated"] = bool(time_limit[i])
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Close the fasttrain env: a later step or reset raises ``RuntimeError`` in one line."""
        self.env.close()

    # SB3 addresses "sub-environments" by index; ours share one params object and one runtime,
    # so attributes come from the game's params or the fasttrain VecEnv, the same for every index.

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        n = len(list(self._get_indices(indices)))
        if attr_name == "render_mode":
            return [self.render_mode] * n
        for source in (self.env.params, self.env):
            if hasattr(source, attr_name):
                return [getattr(source, attr_name)] * n
        raise AttributeError(f"{self.env.game!r} envs have no attribute {attr_name!r}")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(
            f"cannot set {attr_name!r}: fasttrain game params are frozen; make a new env instead"
        )

    def env_method(
        self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        if method_name == "render":  # the text picture of each index's environment
            return [self.env.render(i // self.env.num_agents) for i in self._get_indices(indices)]
        raise AttributeError(f"env_method supports only 'render', got {method_name!r}")

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs


def make_vec_env(
    name: str, num_envs: int, seed: int = 0, backend: str = "cpu", **params
) -> SB3VecEnv:
    """An SB3 ``VecEnv`` of ``num_envs`` copies of game ``name``, reset with ``seed``; its
    ``num_envs`` is ``num_envs * num_agents`` for a game with several agents per env.

    Extra keyword arguments set fields of the game's params (e.g. ``max_episode_steps=200``).
    """
    env = fasttrain.make(name, num_envs=num_envs, backend=backend, seed=seed, **params)
    return SB3VecEnv(env, seed)


__all__ = ["SB3VecEnv", "make_vec_env"]

"""Gymnasium adapter: any fasttrain game as a ``gymnasium.vector.VectorEnv``.

>>> from fasttrain.adapters.gym import make_vec
>>> envs = make_vec("cartpole", num_envs=8, seed=0)
>>> obs, infos = envs.reset(seed=0)
>>> obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())

Our games reset inside the step, so the adapter declares ``AutoresetMode.SAME_STEP``: the
observation returned for a finished env is already the first one of its next episode, and the last
observation of the finished episode is in ``infos["final_obs"]`` (an object array, ``None`` where
no episode ended) with the mask ``infos["_final_obs"]``, exactly as ``SyncVectorEnv`` does in that
mode. ``infos`` is ``{}`` on steps where no episode ended.

Copies: the arrays are NumPy views of the kernel buffers (``env.arrays``), which the next
step overwrites in place. With ``copy=True`` (the default, as in ``SyncVectorEnv``) ``reset`` and
``step`` return copies, so data a caller keeps from one step (a replay buffer, a list of
observations) is not changed by the next; ``copy=False`` returns the views themselves, with no
copy at all, for loops that consume each step's arrays before stepping again. ``final_obs`` rows
are always copied: the ``final_obs`` buffer is reused by every later episode end.

Games with several agents per environment (the arena): every agent is one row of the vector env,
as in PufferLib, so ``envs.num_envs`` is ``num_envs * num_agents`` (``envs.env.num_rows``), agent
a of environment i in row ``i * num_agents + a``. Each row has its own episodes (an agent's
lives), rewards, ``terminated``/``truncated`` and ``final_obs``; ``render()`` gives one picture
per environment, not per row. One policy acting for every row is self-play with shared weights.
For separate policies per agent use ``fasttrain.adapters.pettingzoo``.

One plain environment: ``GymEnv`` is a single ``gymnasium.Env`` of one single-agent game, so
Gymnasium's and Stable-Baselines3's ``check_env`` and any tool written for one environment work.
Every single-agent game is registered with Gymnasium as ``fasttrain/<Name>-v0`` once both
fasttrain and gymnasium are imported (in either order; see ``fasttrain/__init__.py``):

>>> import gymnasium, fasttrain
>>> env = gymnasium.make("fasttrain/Snake-v0", height=8, width=8)   # game params as kwargs
>>> obs, info = env.reset(seed=0)

Ids: ``gym_id(game)``, e.g. ``fasttrain/CartPole-v0``, ``fasttrain/MinAtar-Breakout-v0``,
``fasttrain/MinAtar-SpaceInvaders-v0``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

try:
    import gymnasium
    from gymnasium import spaces
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fasttrain.adapters.gym needs gymnasium: pip install 'fasttrain[gym]'"
    ) from exc

import fasttrain
from fasttrain.kernels import GameSpec


def observation_space(spec: GameSpec, params) -> spaces.Box:
    """The Box of one observation: the game's ``obs_bounds(params)`` when its module defines
    one, else the full range of an integer dtype (``Box(0, 255)`` for uint8 grids), else
    unbounded floats."""
    shape = tuple(spec.obs_shape(params))
    dtype = np.dtype(spec.obs_dtype)
    module = spec.module or sys.modules.get(spec.step_one.__module__)
    bounds = getattr(module, "obs_bounds", None)
    if bounds is not None:
        low, high = bounds(params)
    elif dtype == np.bool_:
        low, high = 0, 1
    elif dtype.kind in "iu":
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return spaces.Box(
        np.broadcast_to(np.asarray(low, dtype), shape).copy(),
        np.broadcast_to(np.asarray(high, dtype), shape).copy(),
        shape,
        dtype,
    )


class GymVectorEnv(VectorEnv):
    """A fasttrain VecEnv's rows (one per env and agent) behind Gymnasium's vector API
    (same-step reset)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["ansi"]}

    def __init__(self, env: fasttrain.VecEnv, copy: bool = True, render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.copy = copy
        self.render_mode = render_mode
        self.num_envs = env.num_rows  # one row per agent of each environment
        self.single_observation_space = observation_space(env.spec, env.params)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = spaces.Discrete(env.num_actions)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        arrays = self.env.arrays
        # host views of the kernel buffers (the same memory on cpu/python)
        self._to_host = env.to_host
        self._buffers = [arrays[k] for k in ("obs", "rewards", "terminated", "truncated")]
        self._final_obs = arrays["final_obs"]

    def _host(self, array):
        out = self._to_host(array)
        return out.copy() if self.copy and out is array else out

    def close_extras(self, **kwargs) -> None:
        """Close the fasttrain env (``close()`` calls this): a later step or reset raises
        ``RuntimeError`` in one line."""
        self.env.close()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; ``seed`` reseeds environment i's stream from ``(seed, i)``."""
        if options:
            raise ValueError(f"reset options are not supported, got keys {sorted(options)}")
        super().reset(seed=seed)
        self.env.reset(seed)
        return self._host(self._buffers[0]), {}

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step with ``actions`` (one integer per row); rows whose episode ended restart."""
        self.env.step(np.asarray(actions))  # checks shape, dtype and range before stepping
        obs, rewards, terminated, truncated = (self._host(b) for b in self._buffers)
        infos: dict[str, Any] = {}
        done = np.logical_or(terminated, truncated)
        if done.any():
            final = self._to_host(self._final_obs)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i].copy()  # the buffer row is reused by the next episode end
            infos = {
                "final_obs": final_obs,
                "_final_obs": done,
                "final_info": {},
                "_final_info": done.copy(),
            }
        return obs, rewards, terminated, truncated, infos

    def render(self) -> tuple[str, ...] | None:
        """Text pictures of every environment (one per environment, not per agent row) when
        ``render_mode="ansi"``, else None."""
        if self.render_mode != "ansi":
            return None
        return tuple(self.env.render(i) for i in range(self.env.num_envs))

    def __repr__(self):
        agents = "" if self.env.num_agents == 1 else f", num_agents={self.env.num_agents}"
        return f"GymVectorEnv({self.env.game!r}, num_envs={self.num_envs}{agents})"


def make_vec(
    name: str,
    num_envs: int,
    seed: int = 0,
    backend: str = "cpu",
    copy: bool = True,
    render_mode: str | None = None,
    **params,
) -> GymVectorEnv:
    """A Gymnasium ``VectorEnv`` of ``num_envs`` copies of game ``name``, reset with ``seed``;
    its ``num_envs`` is ``num_envs * num_agents`` for a game with several agents per env.

    Extra keyword arguments set fields of the game's params (e.g. ``max_episode_steps=200``).
    """
    env = fasttrain.make(name, num_envs=num_envs, backend=backend, seed=seed, **params)
    return GymVectorEnv(env, copy=copy, render_mode=render_mode)


class GymEnv(gymnasium.Env):
    """One environment of a single-agent game as a plain ``gymnasium.Env`` (on the CPU).

    ``step`` returns the episode's final observation when it ends (the game has already
    restarted inside the step; the next ``reset()`` returns that fresh start without another
    reset). ``reset(seed=s)`` reseeds, so the same seed and actions replay the same episode.
    ``render_mode``: ``"ansi"`` (the game's text picture) or ``"rgb_array"`` (its colour
    picture, for games with ``render_rgb``); after an episode's last step they show the next
    episode's start. Extra keyword arguments set the game's params.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10}

    def __init__(self, game: str, render_mode: str | None = None, seed: int = 0, **params):
        self.env = fasttrain.make(game, num_envs=1, backend="cpu", seed=seed, **params)
        if self.env.num_agents > 1:
            raise ValueError(
                f"{game!r} has {self.env.num_agents} agents per environment, not one: use "
                "fasttrain.adapters.gym.make_vec (one row per agent) or "
                "fasttrain.adapters.pettingzoo"
            )
        if render_mode not in (None, "ansi", "rgb_array"):
            raise ValueError(
                f"render_mode must be None, 'ansi' or 'rgb_array', got {render_mode!r}"
            )
        if render_mode == "rgb_array" and self.env.spec.render_rgb is None:
            raise ValueError(f"game {game!r} has no colour pictures; use render_mode='ansi'")
        self.game = game
        self.render_mode = render_mode
        modes = ["ansi"] + (["rgb_array"] if self.env.spec.render_rgb is not None else [])
        self.metadata = {**self.metadata, "render_modes": modes}
        self.observation_space = observation_space(self.env.spec, self.env.params)
        self.action_space = spaces.Discrete(self.env.num_actions)
        arrays = self.env.arrays
        self._obs, self._final_obs = arrays["obs"], arrays["final_obs"]
        self._rewards = arrays["rewards"]
        self._terminated, self._truncated = arrays["terminated"], arrays["truncated"]
        self._actions = np.zeros(1, dtype=np.int64)
        self._fresh = True  # the env stands at an episode's start (made, or restarted)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; ``seed`` reseeds the game's random stream first."""
        if options:
            raise ValueError(f"reset options are not supported, got keys {sorted(options)}")
        super().reset(seed=seed)
        if seed is not None:
            self.env.reset(int(seed) % 2**64)
        elif not self._fresh:  # mid-episode: start over (an ended episode already restarted)
            self.env.reset()
        self._fresh = False
        return self._obs[0].copy(), {}

    def close(self) -> None:
        """Close the fasttrain env: a later step or reset raises ``RuntimeError`` in one line."""
        self.env.close()

    def step(self, action):
        """One step; at an episode's end the observation is that episode's last one."""
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an int in [0, {self.action_space.n}), got {action!r}")
        self._actions[0] = int(action)
        self.env.step(self._actions)
        terminated, truncated = bool(self._terminated[0]), bool(self._truncated[0])
        ended = terminated or truncated
        obs = (self._final_obs if ended else self._obs)[0].copy()
        self._fresh = ended
        return obs, float(self._rewards[0]), terminated, truncated, {}

    def render(self):
        if self.render_mode == "ansi":
            return self.env.render(0)
        if self.render_mode == "rgb_array":
            return self.env.render_rgb(0)
        return None

    def __repr__(self):
        return f"GymEnv({self.game!r})"


from fasttrain.adapters.gym_registry import gym_id, register_envs  # noqa: E402

__all__ = ["GymEnv", "GymVectorEnv", "gym_id", "make_vec", "observation_space", "register_envs"]

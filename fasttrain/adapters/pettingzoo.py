"""PettingZoo adapter: one environment of any fasttrain game as a ``pettingzoo.ParallelEnv``.

>>> from fasttrain.adapters.pettingzoo import parallel_env
>>> env = parallel_env("arena", seed=0, num_snakes=4)
>>> obs, infos = env.reset()
>>> while env.agents:
...     actions = {agent: env.action_space(agent).sample() for agent in env.agents}
...     obs, rewards, terminations, truncations, infos = env.step(actions)

Agents are ``agent_0 .. agent_{A-1}``, agent ``a`` being row ``a`` of the game (snake ``a`` of
the arena); a single-agent game has the one agent ``agent_0``. Every agent has the same spaces:
the game's observation Box (``fasttrain.adapters.gym.observation_space``) and
``Discrete(num_actions)``.

Episodes. PettingZoo removes an agent from ``agents`` once its episode ends and never brings it
back before ``reset()``, but our kernels respawn an agent inside the step that ends its life.
The adapter's rule: an agent's PettingZoo episode is its first life after ``reset()``. On the
step that ends it, the agent's entries say ``terminated`` or ``truncated`` and its observation
is the last one of that life (the kernel's ``final_obs`` row, not the respawned start); then it
leaves ``agents``. When ``agents`` is empty the caller calls ``reset()``, which resets the whole
environment.

Removed agents still play. The kernel cannot pause one agent (the arena has no "stay" action),
so until every agent has ended, the adapter steps each removed agent's slot with action 0 and
throws away its rewards and observations. In the arena that slot is a snake heading up, dying at
the wall and respawning: a scripted opponent that occupies cells, may eat food, kills a live
snake that runs into it and leaves corpses a live snake may eat. We accept this: every
transition returned is still a true transition of the game's world, only that world now holds a
scripted snake, and no data about the removed agent is invented. A learner that wants every life
of every agent (no scripted slots) should use the Gymnasium or SB3 adapter, which expose each
agent as a vector-env row, or fasttrain's own learners. The kernel's ``stats()`` count the
scripted lives too. In a game without ``reset_agent`` every agent ends on the same step anyway.

Seeding: ``reset(seed=s)`` resets the game from ``s``; ``reset()`` without a seed resets it from
a seed drawn from a generator seeded by the last seed given (``parallel_env(..., seed=s)`` counts
as given, so its first ``reset()`` equals ``reset(seed=s)``). Reset ``options`` are accepted, as
the API requires, and ignored: no fasttrain game takes any.

Returned arrays are copies; the kernel buffers are overwritten by the next step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from gymnasium import spaces
    from pettingzoo import ParallelEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fasttrain.adapters.pettingzoo needs pettingzoo: pip install 'fasttrain[pettingzoo]'"
    ) from exc

import fasttrain
from fasttrain.adapters.gym import observation_space
from fasttrain.kernels.rng import check_int, check_seed

IDLE_ACTION = 0  # played by the slot of an agent whose PettingZoo episode has ended


class FasttrainParallelEnv(ParallelEnv):
    """One environment of a fasttrain game behind PettingZoo's parallel API."""

    def __init__(self, env: fasttrain.VecEnv, seed: int = 0, render_mode: str | None = None):
        if env.num_envs != 1:
            raise ValueError(f"a ParallelEnv wraps one environment, got num_envs={env.num_envs}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.render_mode = render_mode
        self.metadata = {
            "name": env.game,
            "is_parallelizable": True,
            "render_modes": ["ansi"],
        }
        self.possible_agents = [f"agent_{a}" for a in range(env.num_agents)]
        self._rows = {agent: row for row, agent in enumerate(self.possible_agents)}
        # one space object per agent, so seeding one agent's space leaves the others' alone
        self.observation_spaces = {
            agent: observation_space(env.spec, env.params) for agent in self.possible_agents
        }
        self.action_spaces = {
            agent: spaces.Discrete(env.num_actions) for agent in self.possible_agents
        }
        self.agents: list[str] = []  # the agents still in their first life; set by reset()
        self._pending_seed: int | None = seed  # used by the next reset() without a seed
        self._seeds = np.random.default_rng(seed)
        self._actions = np.zeros(env.num_rows, dtype=np.int64)  # (num_agents,) next actions

    def observation_space(self, agent: str) -> spaces.Box:
        """The Box of ``agent``'s observations (the same object on every call)."""
        return self.observation_spaces[self._name(agent)]

    def action_space(self, agent: str) -> spaces.Discrete:
        """``Discrete(num_actions)`` for ``agent`` (the same object on every call)."""
        return self.action_spaces[self._name(agent)]

    def _name(self, agent) -> str:
        if agent not in self._rows:
            raise ValueError(
                f"unknown agent {agent!r} for game {self.env.game!r}; valid: "
                f"agent_0..agent_{len(self.possible_agents) - 1}"
            )
        return agent

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Reset the environment (from ``seed``, or from the adapter's seed generator); every
        agent starts a new episode. ``options`` are ignored."""
        if seed is None:
            seed = self._pending_seed
            if seed is None:
                seed = int(self._seeds.integers(2**63))
        else:
            self._seeds = np.random.default_rng(check_seed(seed))
        self.env.reset(seed)
        self._pending_seed = None
        self.agents = list(self.possible_agents)
        host_obs = self.env.to_host(self.env.arrays["obs"])
        obs = {agent: host_obs[self._rows[agent]].copy() for agent in self.agents}
        return obs, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        """Step every agent in ``agents`` with its action; ended agents leave ``agents``."""
        self._load_actions(actions)
        self.env.step(self._actions)
        arrays, to_host = self.env.arrays, self.env.to_host
        obs, final_obs = to_host(arrays["obs"]), to_host(arrays["final_obs"])
        rewards, terminated, truncated = (
            to_host(arrays[k]) for k in ("rewards", "terminated", "truncated")
        )
        out_obs, out_rewards, out_terminated, out_truncated, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            row = self._rows[agent]
            ended = bool(terminated[row] or truncated[row])
            # the kernel already respawned an ended agent: its episode's last obs is final_obs
            out_obs[agent] = (final_obs if ended else obs)[row].copy()
            out_rewards[agent] = float(rewards[row])
            out_terminated[agent] = bool(terminated[row])
            out_truncated[agent] = bool(truncated[row])
            infos[agent] = {}
        self.agents = [a for a in self.agents if not (out_terminated[a] or out_truncated[a])]
        return out_obs, out_rewards, out_terminated, out_truncated, infos

    def _load_actions(self, actions) -> None:
        """Checked ``actions`` into the action buffer; removed agents' slots get IDLE_ACTION."""
        if not self.agents:
            raise ValueError(
                "no agent is playing: call reset() (first, and once every agent ended)"
            )
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict agent -> int, got {type(actions).__name__}")
        playing = set(self.agents)
        for agent in actions:
            if agent not in playing:
                state = "has ended its episode" if agent in self._rows else "is unknown"
                raise ValueError(
                    f"action for agent {agent!r}, which {state}; playing: {self.agents}"
                )
        missing = [agent for agent in self.agents if agent not in actions]
        if missing:
            raise ValueError(f"no action for playing agent(s) {missing}")
        self._actions[:] = IDLE_ACTION
        for agent, action in actions.items():
            action = check_int(action, f"action for {agent!r}")
            if not 0 <= action < self.env.num_actions:
                raise ValueError(
                    f"action {action} for {agent!r} is out of range: game {self.env.game!r} "
                    f"takes actions 0..{self.env.num_actions - 1}"
                )
            self._actions[self._rows[agent]] = action

    def render(self) -> str | None:
        """Text picture of the environment when ``render_mode="ansi"``, else None."""
        return self.env.render(0) if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the fasttrain env: a later step or reset raises ``RuntimeError`` in one line."""
        self.env.close()

    def __repr__(self):
        return f"FasttrainParallelEnv({self.env.game!r}, agents={len(self.possible_agents)})"


def parallel_env(
    name: str, seed: int = 0, backend: str = "cpu", render_mode: str | None = None, **params
) -> FasttrainParallelEnv:
    """A PettingZoo ``ParallelEnv`` of one environment of game ``name``, seeded with ``seed``.

    Extra keyword arguments set fields of the game's params (e.g. ``num_snakes=4``).
    """
    env = fasttrain.make(name, num_envs=1, backend=backend, seed=seed, **params)
    return FasttrainParallelEnv(env, seed, render_mode=render_mode)


__all__ = ["FasttrainParallelEnv", "parallel_env"]

"""DQN, CleanRL-style, vectorised over many environments, with a replay ring the env writes into.

The replay buffer is a time-major ring of ``num_slots`` steps of ``num_envs`` transitions, all
preallocated on the learner's device. The environment writes each step's observations straight
into the next ring slot ``obs[(pos + 1) % S]`` and final observations of ended episodes into
``final_obs[pos]``, so the true next observation of the transition in slot ``s`` is
``final_obs[s]`` where its episode ended and ``obs[s + 1]`` otherwise. Targets bootstrap through
truncation (from the final observation) and stop only at termination. Options beyond CleanRL's
dqn.py: n-step returns, Double DQN, dueling heads, prioritized replay (proportional), Huber loss.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from fasttrain.errors import ConfigError
from fasttrain.learners import savedstate
from fasttrain.learners.actors import actor_of
from fasttrain.learners.base import TrainerBase, check_memory
from fasttrain.learners.compile import CompiledStep, call_module
from fasttrain.learners.context import warn_once

# CONFIG: the [dqn] dataclass and its checks are in dqn_config.py (torch-free)
from fasttrain.learners.dqn_config import AUTO_COMPILE
from fasttrain.learners.optim import foreach_copy, foreach_lerp
from fasttrain.learners.sumtree import SumTree
from fasttrain.models import make_q_network

PRIO_EPS = 1e-6  # keeps every stored transition's priority above zero

# ------------------------------------------------------------------------------- CONFIG


# ------------------------------------------------------------------------------- REPLAY


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """CleanRL's linear decay from ``start`` to ``end`` over ``duration`` steps."""
    slope = (end - start) / max(duration, 1)
    return max(slope * t + start, end) if end <= start else min(slope * t + start, end)


def nstep_returns(rewards, terminated, truncated, gamma: float):
    """n-step returns of ``(B, n)`` reward windows that stop at the first episode end.

    Returns ``(returns, discount, last, ended)``: the discounted reward sum up to and including
    the first terminated or truncated step (or all n); the factor of the bootstrap value,
    ``gamma**steps`` but 0 after a termination; the window index ``last`` of the final step used;
    and whether the episode ended there (then the next observation is that step's final_obs).
    """
    done = terminated | truncated
    alive = torch.ones_like(done)  # alive[:, k]: no episode end before step k of the window
    alive[:, 1:] = done[:, :-1].cumsum(1) == 0
    n = rewards.shape[1]
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=torch.float64)
    returns = (rewards.double() * alive * powers).sum(1).float()
    steps = alive.sum(1)
    last = steps - 1
    ended = done.gather(1, last[:, None])[:, 0]
    stopped = terminated.gather(1, last[:, None])[:, 0]
    discount = torch.where(stopped, 0.0, gamma ** steps.double()).float()
    return returns, discount, last, ended


class ReplayBuffer:
    """Ring tensors ``(num_slots, num_envs, ...)`` on ``device``; slot ``pos`` holds current obs.

    Transitions live in the ``count`` slots before ``pos``; a step writes actions, rewards and
    flags at ``pos`` and the env writes the next observations into ``pos + 1``, overwriting the
    oldest slot. Sampling draws (slot, env) pairs whose n-step window is complete.

    Prioritized sampling descends a sum tree over ``slot * num_envs + env`` whose leaves are the
    stored priorities where the window is complete and 0 elsewhere (empty slots, and the newest
    ``n_step`` slots, whose windows reach past the newest step).
    """

    def __init__(
        self,
        num_slots: int,
        num_envs: int,
        obs_shape,
        obs_dtype,
        device,
        n_step=1,
        prioritized=False,
        prio_alpha=0.6,
    ):
        S, N = num_slots, num_envs
        self.num_slots, self.num_envs, self.n_step = S, N, n_step
        self.prioritized, self.prio_alpha = prioritized, prio_alpha
        # frames[0] = obs ring, frames[1] = final_obs ring: one gather fetches either
        self.frames = torch.zeros((2, S, N, *obs_shape), dtype=obs_dtype, device=device)
        self.flat_frames = self.frames.view(2 * S * N, *obs_shape)
        self.obs, self.final_obs = self.frames[0], self.frames[1]
        self.actions = torch.zeros((S, N), dtype=torch.int64, device=device)
        self.rewards = torch.zeros((S, N), dtype=torch.float32, device=device)
        self.terminated = torch.zeros((S, N), dtype=torch.bool, device=device)
        self.truncated = torch.zeros((S, N), dtype=torch.bool, device=device)
        # priorities ** alpha per transition; 0 where no transition is stored
        self.priorities = torch.zeros(
            (S, N) if prioritized else (0,), dtype=torch.float32, device=device
        )
        self.max_priority = torch.ones((), device=device)
        # priorities of the complete windows, float64; the tree is derived, never saved
        self.tree = SumTree(S * N, device) if prioritized else None
        self.stale_steps = 0  # advances whose rows the tree has not caught up with yet
        self.window = torch.arange(n_step, device=device)
        self.pos = 0
        self.count = 0  # complete transitions stored, at most S - 1

    @property
    def next_slot(self) -> int:
        return (self.pos + 1) % self.num_slots

    def advance(self) -> None:
        """Call after writing slot ``pos`` and the next obs into ``next_slot``."""
        if self.prioritized:
            self.priorities[self.pos] = self.max_priority
            self.priorities[self.next_slot] = 0.0  # its transition lost its observation
            # the tree catches up at the next sample: one batched update for all the steps between
            self.stale_steps += 1
        self.pos = self.next_slot
        self.count = min(self.count + 1, self.num_slots - 1)

    @property
    def num_valid(self) -> int:
        """Start slots whose whole n-step window is stored."""
        return max(self.count - self.n_step + 1, 0)

    def complete(self, slots: torch.Tensor) -> torch.Tensor:
        """Whether the n-step windows starting at ``slots`` end before the current slot."""
        return (self.pos - slots) % self.num_slots >= self.n_step

    def refresh_tree(self) -> None:
        """Bring the tree's leaves of the rows changed by ``advance`` up to date."""
        steps, self.stale_steps = self.stale_steps, 0
        if steps:
            # advancing from a to a + 1 changes rows a + 1 (emptied), a (newly stored) and
            # a + 1 - n_step (its window completed): `steps` advances change the rows ending at pos
            rows = min(steps + self.n_step, self.num_slots)
            self.write_tree_rows((self.pos - rows + 1) % self.num_slots, rows)

    def write_tree_rows(self, first: int, rows: int) -> None:
        """Set the tree's leaves of ``rows`` ring rows from ``first`` (wrapping) from priorities."""
        S, N = self.num_slots, self.num_envs
        for start, stop in ((first, min(first + rows, S)), (0, first + rows - S)):
            if start < stop:
                slots = torch.arange(start, stop, device=self.priorities.device)
                values = self.priorities[start:stop] * self.complete(slots)[:, None]
                self.tree.update_range(start * N, values.view(-1))

    def sample(self, batch_size: int, generator, beta: float = 1.0):
        """``(slots, envs, weights)``: start slots ``(B,)``, env rows ``(B,)``, IS weights."""
        S, N, dev = self.num_slots, self.num_envs, self.actions.device
        if not self.prioritized:
            oldest = self.pos - self.count
            offsets = torch.randint(
                0, self.num_valid, (batch_size,), generator=generator, device=dev
            )
            slots = (oldest + offsets) % S
            envs = torch.randint(0, N, (batch_size,), generator=generator, device=dev)
            return slots, envs, None
        self.refresh_tree()
        total = self.tree.total()
        u = torch.rand(batch_size, generator=generator, device=dev, dtype=torch.float64) * total
        index = self.tree.sample(u)
        probs = self.priorities.view(-1)[index].double() / total
        smallest = self.tree.min() / total
        size = self.num_valid * N
        is_weights = ((size * probs) ** -beta / (size * smallest) ** -beta).float()
        return index // N, index % N, is_weights

    def update_priorities(self, slots, envs, td_errors) -> None:
        # a skipped (non-finite) update must not poison the sampling distribution
        errors = torch.nan_to_num(td_errors.abs().float(), nan=0.0, posinf=0.0)
        priority = (errors + PRIO_EPS) ** self.prio_alpha
        self.priorities[slots, envs] = priority
        self.max_priority = torch.maximum(self.max_priority, priority.max())
        # read back: where a (slot, env) repeats, the tree gets the value the ring kept
        leaves = slots * self.num_envs + envs
        self.tree.update(leaves, self.priorities.view(-1)[leaves] * self.complete(slots))

    def gather(self, slots, envs, gamma: float):
        """``(obs, actions, returns, discount, next_obs)`` of n-step transitions."""
        S, N = self.num_slots, self.num_envs
        window = (slots[:, None] + self.window) % S  # (B, n)
        rows = envs[:, None]
        returns, discount, last, ended = nstep_returns(
            self.rewards[window, rows],
            self.terminated[window, rows],
            self.truncated[window, rows],
            gamma,
        )
        last_slot = window.gather(1, last[:, None])[:, 0]
        # next obs: final_obs[last] where the episode ended, else obs[last + 1]
        next_index = torch.where(ended, S * N + last_slot * N, ((last_slot + 1) % S) * N) + envs
        obs = self.flat_frames[slots * N + envs]
        return obs, self.actions[slots, envs], returns, discount, self.flat_frames[next_index]

    def state_dict(self) -> dict:
        names = ("frames", "actions", "rewards", "terminated", "truncated", "priorities")
        state = {name: getattr(self, name).cpu().clone() for name in names}
        return {
            **state,
            "max_priority": self.max_priority.cpu(),
            "pos": self.pos,
            "count": self.count,
        }

    def check_state_dict(self, state: dict, num_actions: int, categories: int) -> None:
        """Refuse, in one line and changing nothing, a saved buffer that does not fit this
        one: its arrays' shapes and dtypes, actions and observations in range, priorities
        finite and >= 0, its position and count within the ring."""
        savedstate.table(state, "replay")
        below = {"frames": categories, "actions": num_actions}
        for name in ("frames", "actions", "rewards", "terminated", "truncated", "priorities"):
            saved = savedstate.field(state, name, "a replay buffer array", f"replay.{name}")
            savedstate.like(saved, f"replay.{name}", getattr(self, name), below.get(name, 0))
        if self.prioritized and bool((state["priorities"] < 0).any()):
            raise savedstate.refuse("replay.priorities", state["priorities"], "priorities >= 0")
        top = savedstate.field(state, "max_priority", "a priority", "replay.max_priority")
        savedstate.like(top, "replay.max_priority", self.max_priority)
        if not float(top) > 0:
            raise savedstate.refuse("replay.max_priority", float(top), "a priority > 0")
        last = self.num_slots - 1
        savedstate.count(
            savedstate.field(state, "pos", "a slot", "replay.pos"), "replay.pos", most=last
        )
        count = savedstate.field(state, "count", "a count", "replay.count")
        savedstate.count(count, "replay.count", most=last)

    def load_state_dict(self, state: dict) -> None:
        for name in ("frames", "actions", "rewards", "terminated", "truncated", "priorities"):
            getattr(self, name).copy_(state[name])
        self.max_priority.copy_(state["max_priority"])
        self.pos, self.count = state["pos"], state["count"]
        if self.prioritized:  # the tree is a pure function of the priorities and pos: rebuild it
            self.stale_steps = 0
            self.write_tree_rows(0, self.num_slots)


def new_network(config, obs_shape, obs_dtype, num_actions: int, obs_categories=0, device="cpu"):
    """DQN's network for observations of ``obs_shape`` and ``obs_dtype``: a Q-network, with
    dueling heads where ``dqn.dueling``."""
    dueling = config.learner.dueling
    return make_q_network(
        obs_shape, obs_dtype, num_actions, config.model, device, dueling, obs_categories
    )


actor = actor_of(new_network, policy=False)  # play and eval: the argmax of the Q-values


class Trainer(TrainerBase):
    """Holds the environment, Q-networks, optimizer and replay buffer of one DQN run.

    One iteration is ``num_steps`` vectorised env steps with ``gradient_steps`` updates after
    every ``train_frequency`` of them (once ``learning_starts`` env steps have been taken).
    """

    def __init__(self, config, warn=print, members=None):
        super().__init__(config, members)
        args, env = self.args, self.env
        self.q_network, self.optimizer = self.build(self.make_network, eps=1e-8)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.batch_size = args.batch_size
        self.num_iterations = max(1, args.total_timesteps // self.steps_per_iteration)
        if args.buffer_size < self.rows * args.n_step:
            raise ConfigError(
                f"dqn.buffer_size = {args.buffer_size} must hold n_step = {args.n_step} steps "
                f"of {self.rows} agent rows (>= {self.rows * args.n_step})"
            )
        slots = args.buffer_size // self.rows + 1
        obs_bytes = env.obs_dtype.itemsize * math.prod(env.obs_shape)
        tree_bytes = SumTree.nbytes(slots * self.rows) if args.prioritized else 0
        check_memory(
            slots * self.rows * (2 * obs_bytes + 18) + tree_bytes,
            "DQN replay buffer",
            self.device,
        )
        self.buffer = ReplayBuffer(
            slots,
            self.rows,
            env.obs_shape,
            env.obs_dtype,
            self.device,
            args.n_step,
            args.prioritized,
            args.prio_alpha,
        )
        self.buffer.obs[0].copy_(env.obs)
        # the env writes obs[pos + 1], final_obs[pos], and the rewards and flags of slot pos:
        # each slot is bound on first use (a ring can have many slots) and kept
        self.step_outputs = [None] * self.buffer.num_slots
        warn = warn_once(warn)  # one compile warning covers acting and the update
        self.compile_mode = self.compile_mode_for(AUTO_COMPILE)
        self.act_network = CompiledStep(
            call_module, self.q_network, self.compile_mode, warn, "the network"
        )
        self.train_step = CompiledStep(Trainer.minibatch_step, self, self.compile_mode, warn)

    @property
    def network(self):
        return self.q_network

    acting = network
    builder = staticmethod(new_network)  # the network it trains and acts with

    def describe(self) -> str:
        args = self.args
        return (
            f"{self.describe_rows()} x {args.num_steps} steps per iteration | replay "
            f"{args.buffer_size:,}, batch {self.batch_size}"
            + ("" if self.world == 1 else f" | per rank x {self.world} ranks")
            + self.compile_note()
        )

    # --------------------------------------------------------------------------- ROLLOUT

    def epsilon(self) -> float:
        args = self.args
        duration = args.exploration_fraction * args.total_timesteps
        return linear_schedule(args.start_e, args.end_e, duration, self.global_step)

    def env_step(self) -> None:
        """One epsilon-greedy vectorised step, written straight into the replay ring."""
        env, buffer, N = self.env, self.buffer, self.rows
        pos, nxt = buffer.pos, buffer.next_slot
        t0 = time.perf_counter()
        with torch.inference_mode():
            epsilon = self.epsilon()
            random_actions = torch.randint(
                0, env.num_actions, (N,), generator=self.generator, device=self.device
            )
            if epsilon < 1.0:
                greedy = self.act_network(buffer.obs[pos]).argmax(dim=1)
                explore = torch.rand(N, generator=self.generator, device=self.device) < epsilon
                action = torch.where(explore, random_actions, greedy)
            else:
                action = random_actions
            buffer.actions[pos] = action
        t1 = time.perf_counter()
        # actions are in range by construction: skip the check that costs a host sync on cuda
        out = self.step_outputs[pos]
        if out is None:
            slot = (buffer.final_obs, buffer.rewards, buffer.terminated, buffer.truncated)
            outputs = (buffer.obs[nxt], *(t[pos] for t in slot))
            out = self.step_outputs[pos] = env.bind_outputs(*outputs)
        env.step(buffer.actions[pos], out=out, check=False)
        buffer.advance()
        self.global_step += N * self.world  # agent steps, all ranks
        t2 = time.perf_counter()
        self.timers.forward += t1 - t0
        self.timers.env += t2 - t1

    # --------------------------------------------------------------------------- UPDATE

    def td_target(self, returns, discount, next_obs) -> torch.Tensor:
        with torch.no_grad():
            next_q = self.target_network(next_obs).float()
            if self.args.double_q:
                best = self.q_network(next_obs).argmax(dim=1, keepdim=True)
                next_value = next_q.gather(1, best)[:, 0]
            else:
                next_value = next_q.max(dim=1).values
            return returns + discount * next_value

    def update(self) -> torch.Tensor:
        """One gradient step on a sampled batch; returns ``[td_loss, mean q]`` (no host sync)."""
        args, buffer = self.args, self.buffer
        beta = args.prio_beta + (1.0 - args.prio_beta) * min(
            1.0, self.global_step / args.total_timesteps
        )
        slots, envs, weights = buffer.sample(args.batch_size, self.generator, beta)
        obs, actions, returns, discount, next_obs = buffer.gather(slots, envs, args.gamma)
        target = self.td_target(returns, discount, next_obs)
        stats, td_errors = self.train_step(obs, actions, target, weights)
        if weights is not None:
            buffer.update_priorities(slots, envs, td_errors)
        return stats

    def minibatch_step(self, obs, actions, target, weights):
        """One optimizer step on a sampled batch (loss, backward, clipping, the step; skipped
        when not finite): ``([td_loss, mean q], td_errors)``, td_errors for prioritized replay
        only. ``run.compile`` compiles it."""
        args = self.args
        with self.ctx.autocast():
            q_all = self.q_network(obs)
        q = q_all.float().gather(1, actions[:, None])[:, 0]
        if args.loss == "huber":
            elementwise = F.smooth_l1_loss(q, target, reduction="none")
        else:
            elementwise = F.mse_loss(q, target, reduction="none")
        loss = elementwise.mean() if weights is None else (weights * elementwise).mean()
        self.ctx.optimizer_step(
            self.optimizer, loss, self.q_network.parameters(), args.max_grad_norm
        )
        q = q.detach()
        td_errors = None if weights is None else q - target  # priorities only
        return torch.stack([loss.detach(), q.mean()]), td_errors

    def update_target(self) -> None:
        tau = self.args.tau
        with torch.no_grad():
            online = list(self.q_network.parameters())
            target = list(self.target_network.parameters())
            if tau == 1.0:
                foreach_copy(target, online)
            else:
                foreach_lerp(target, online, tau)

    def iterate(self) -> list[dict]:
        """``num_steps`` env steps with updates every ``train_frequency``; returns mean losses."""
        args = self.args
        totals = torch.zeros(2, device=self.device)
        updates = 0
        for t in range(args.num_steps):
            self.env_step()
            learning = self.global_step >= args.learning_starts and self.buffer.num_valid > 0
            if (t + 1) % args.train_frequency or not learning:
                continue
            t0 = time.perf_counter()
            for _ in range(args.gradient_steps):
                totals += self.update()
                updates += 1
            # CleanRL's rule, in env steps: update when global_step crosses a multiple
            tnf = args.target_network_frequency
            steps_since_update = self.global_step % tnf
            if steps_since_update < self.rows * self.world * args.train_frequency:
                self.update_target()
            self.timers.learn += time.perf_counter() - t0
        self.iteration += 1
        losses = self.member_losses(("td_loss", "q_values"), totals, updates)[0]
        if not updates:
            losses["losses/td_loss"] = losses["losses/q_values"] = np.nan
        return [{**losses, "charts/epsilon": self.epsilon()}]

    # --------------------------------------------------------------------------- STATE

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        """Everything needed to continue bit for bit, the replay buffer included."""
        return {
            **super().member_state(k, env_state),
            "target_model": self.target_network.state_dict(),
            "replay": self.buffer.state_dict(),
        }

    def check_member_state(self, k: int, state: dict) -> None:
        super().check_member_state(k, state)
        if "replay" not in state:
            raise ConfigError("checkpoint holds no DQN replay buffer")
        target = savedstate.field(state, "target_model", "network weights")
        savedstate.weights(target, "target_model", self.target_network)
        categories = self.env.spec.obs_categories
        self.buffer.check_state_dict(state["replay"], self.env.num_actions, categories)

    def load_member(self, k: int, state: dict) -> None:
        super().load_member(k, state)
        self.target_network.load_state_dict(state["target_model"])
        self.buffer.load_state_dict(state["replay"])


# ------------------------------------------------------------------------------- BENCHMARK


def ceiling(trainer: Trainer, updates: int = 8) -> float:
    """env-steps/s the updates alone would allow (sampling, forward, backward, optimizer step)."""
    args = trainer.args
    trainer.update()
    start = time.perf_counter()
    for _ in range(updates):
        trainer.update().tolist()
    seconds_per_update = (time.perf_counter() - start) / updates
    # each update round of gradient_steps updates follows num_envs * train_frequency env steps
    steps_per_update = trainer.rows * args.train_frequency / args.gradient_steps
    return steps_per_update / seconds_per_update

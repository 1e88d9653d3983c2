"""PPO, CleanRL-style, reading the environment buffers without copies.

The environment writes each step's observations, rewards and flags straight into the rollout
storage slot (``obs[t + 1]``, ``rewards[t]``...; final observations of ended episodes into
``final_obs[t]``), so the learner never gathers or copies experience. Truncated steps bootstrap
from the value of ``final_obs``.

Recurrent policies replay whole sequences from stored states; ``ppo.max_minibatch_size``
accumulates gradients over chunks of a minibatch. ``ppo.overlap`` (acting while learning, with
the decoupled objective) is the subclass in ``learners/ppo_overlap.py``; a population of
members trains through this same trainer (``learners/population.py``), its width hooks
(``learners/base.py``) each member's.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import NamedTuple

import torch
import torch.nn.functional as F

from fasttrain.errors import ConfigError
from fasttrain.learners import distributed, rollout
from fasttrain.learners.actors import actor_of
from fasttrain.learners.base import TrainerBase, annealed, check_memory
from fasttrain.learners.compile import (
    DEFER_SHARE,
    CompiledStep,
    DeferredCompile,
    adopt_compiled,
    call_module,
)
from fasttrain.learners.context import warn_once
from fasttrain.learners.graphs import tensor_addresses, update_key
from fasttrain.learners.optim import make_optimizer, rates_as_tensors

# CONFIG: the [ppo] dataclass and its checks are in ppo_config.py (torch-free)
from fasttrain.learners.ppo_config import AUTO_COMPILE
from fasttrain.learners.rollout import Rollout
from fasttrain.models import make_policy

LOSS_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")

# ------------------------------------------------------------------------------- THE LOSS


class Batch(NamedTuple):
    """A minibatch's samples for the loss, on the last axis (a member's; a population's with
    the member axis first)."""

    actions: torch.Tensor
    old_logprobs: torch.Tensor  # under the policy the ratio is taken against
    advantages: torch.Tensor  # normalised where ppo.norm_adv
    returns: torch.Tensor
    old_values: torch.Tensor
    weights: torch.Tensor | None = None  # each sample's weight (decoupled PPO); None: 1


class Coefs(NamedTuple):
    """PPO's coefficients: numbers for one member; a population's as tensors, ``clip`` and the
    ratio's bounds ``(M, 1)`` against the samples, ``ent_coef`` and ``vf_coef`` ``(M,)``."""

    clip: float | torch.Tensor
    ratio_low: float | torch.Tensor
    ratio_high: float | torch.Tensor
    ent_coef: torch.Tensor
    vf_coef: float | torch.Tensor


def ppo_loss(logits, new_values, batch: Batch, coefs: Coefs, clip_vloss: bool):
    """The PPO loss over the samples on the last axis, every term a mean over them, and its
    stats ``[pg, v, entropy, approx_kl, clipfrac]`` on a new last axis."""
    logits, new_values = logits.float(), new_values.float()
    log_probs = F.log_softmax(logits, dim=-1)
    new_logprob = log_probs.gather(-1, batch.actions[..., None])[..., 0]
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean(-1)
    log_ratio = new_logprob - batch.old_logprobs
    ratio = log_ratio.exp()
    adv = batch.advantages
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(coefs.ratio_low, coefs.ratio_high))
    pg_loss = (pg if batch.weights is None else batch.weights * pg).mean(-1)
    returns, old = batch.returns, batch.old_values
    if clip_vloss:
        clipped = old + (new_values - old).clamp(-coefs.clip, coefs.clip)
        v_loss = 0.5 * torch.max((new_values - returns) ** 2, (clipped - returns) ** 2).mean(-1)
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean(-1)
    loss = pg_loss - coefs.ent_coef * entropy + coefs.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean(-1)
        clipfrac = ((ratio - 1).abs() > coefs.clip).float().mean(-1)
        stats = torch.stack([pg_loss, v_loss, entropy, approx_kl, clipfrac], dim=-1).detach()
    return loss, stats


def normalised(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages normalised to mean 0 and std 1 over the samples on the last axis."""
    mean, std = advantages.mean(-1, keepdim=True), advantages.std(-1, keepdim=True)
    return (advantages - mean) / (std + 1e-8)


def new_network(config, obs_shape, obs_dtype, num_actions: int, obs_categories=0, device="cpu"):
    """PPO's network for observations of ``obs_shape`` and ``obs_dtype``: an actor-critic."""
    return make_policy(obs_shape, obs_dtype, num_actions, config.model, device, obs_categories)


actor = actor_of(new_network, policy=True)  # play and eval: the most likely action, or a sample


# ------------------------------------------------------------------------------- SETUP


class Trainer(TrainerBase):
    """Holds the environment, network, optimizer and rollout storage of one PPO run (or of a
    population's members: ``learners/population.py``)."""

    optional_carried = ("next_episode_starts",)  # checkpoints before it was saved

    def __init__(self, config, warn=print, members=None):
        super().__init__(config, members)
        args = self.args
        self.policy, self.optimizer = self.build(self.make_network, eps=1e-5)
        self.batch_size = self.n * args.num_steps  # each member's, per rank
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.steps_per_iteration)
        self.recurrent = self.policy.is_recurrent
        self.plan_minibatches()
        check_memory(self.storage_bytes(), self.storage_name(), self.device)
        self.storage = self.new_rollout()
        self.storage.obs[0].copy_(self.env.obs)
        # tensors, so annealing the entropy coefficient (ppo.anneal_ent) changes no graph
        self.ent_coef = torch.zeros(self.member_shape, device=self.device)
        self.set_coef(self.ent_coef, lambda a: a.ent_coef)
        self.coefs = Coefs(
            self.per_sample(lambda a: a.clip_coef),
            self.per_sample(lambda a: 1 - a.clip_coef),
            self.per_sample(lambda a: 1 + a.clip_coef),
            self.ent_coef,
            self.per_member(lambda a: a.vf_coef),
        )
        self.max_grad_norm = self.per_member(lambda a: a.max_grad_norm)
        # the rollout's sampling noise, filled in place at every step
        self.noise = torch.empty((self.rows, self.env.num_actions), device=self.device)
        warn_always, warn = warn, warn_once(warn)  # one compile warning for both steps
        self.compile_mode = self.compile_mode_for(AUTO_COMPILE, recurrent=self.recurrent)
        self.train_step = CompiledStep(Trainer.minibatch_step, self, self.compile_mode, warn)
        self.setup_behaviour()
        self.act_policy = CompiledStep(
            call_module, self.behaviour, self.compile_mode, warn, "the network"
        )
        self.deferred = self.compile_in_background(warn_always)
        self.setup_graphs(warn_always, self.rollout_streams)

    @property
    def network(self):
        return self.policy

    @property
    def acting(self):
        return self.behaviour

    builder = staticmethod(new_network)  # the network it trains and acts with

    def set_coef(self, tensor: torch.Tensor, fn) -> None:
        """Each member's coefficient ``fn(section)`` into ``tensor``, in place."""
        value = self.per_member(fn)
        tensor.copy_(value) if isinstance(value, torch.Tensor) else tensor.fill_(value)

    def setup_behaviour(self) -> None:
        """The policy that acts and the random streams it samples from: the learner's own
        (``ppo_overlap`` acts with a copy of the weights from before the update)."""
        self.behaviour, self.rollout_streams = self.policy, self.generators
        self.rollout_generator = self.rollout_streams[0]

    def plan_minibatches(self) -> None:
        """Gradient accumulation chunks and, for a recurrent policy, its sequences."""
        args = self.args
        # chunks of a minibatch along its last index dimension (transitions, or whole
        # sequences for a recurrent policy); None: one piece
        self.chunk = None
        if 0 < args.max_minibatch_size < self.minibatch_size:
            self.chunk = args.max_minibatch_size
        if self.recurrent:
            self.horizon = args.bptt_horizon
            self.sequences = args.num_steps // self.horizon * self.n  # each member's
            self.sequences_per_minibatch = self.sequences // args.num_minibatches
            if self.chunk is not None:
                self.chunk //= self.horizon

    def state_size(self) -> int | None:
        return self.policy.state_size if self.recurrent else None

    def storage_bytes(self) -> int:
        """Bytes of the rollout storage, checked before allocating it."""
        return rollout.nbytes(self.env, self.args.num_steps, True, self.state_size())

    def storage_name(self) -> str:
        M = self.num_members
        return "PPO rollout storage" + (f" ({M} members)" if M > 1 else "")

    def new_rollout(self) -> Rollout:
        """Zeroed storage for one rollout, the env's outputs and the advantage kernel (each
        member's ``gamma`` and ``gae_lambda`` on its columns) bound once."""
        settings = [self.per_column(lambda a: a.gamma), self.per_column(lambda a: a.gae_lambda)]
        backend = self.ctx.device.backend
        return rollout.new_rollout(
            self.env, self.args.num_steps, self.device, backend, settings, True, self.state_size()
        )

    # --------------------------------------------------------------------------- COMPILE

    def compile_in_background(self, say) -> DeferredCompile | None:
        """Where the steps compile: in the background while the first twentieth trains eagerly
        (``precompile``), switching at a fixed iteration; None where they run eagerly, or under
        torchrun, where they compile at once (a copy's gradient all-reduce would meet the real
        one's)."""
        if not self.train_step.compiled or self.ctx.ranks.enabled:
            return None
        switch_at = max(1, self.num_iterations // DEFER_SHARE)
        steps = [self.train_step, self.act_policy]
        deferred = DeferredCompile(
            steps, switch_at, say=say, adopt=self.adopt_compiled, key=self.compile_key
        )
        deferred.start(self.precompile)
        return deferred

    def precompile(self) -> None:
        """Compile the update step and the acting network on copies of them (zero data of the
        real shapes), so the run trains on in the meantime: in the background thread."""
        shadow = self.compile_copy()
        if self.recurrent:
            steps = torch.arange(self.horizon, device=self.device)[:, None] * self.rows
            mb = steps + torch.arange(self.sequences_per_minibatch, device=self.device)[None]
        else:
            mb = torch.arange(self.minibatch_size, device=self.device)
        self.train_step.precompile(shadow, mb)
        self.compiled_on = shadow  # read at the switch (adopt_compiled), after the thread ended
        behaviour = copy.deepcopy(self.behaviour)
        obs_shape = self.env.obs_shape
        obs = torch.zeros((self.rows, *obs_shape), dtype=self.env.obs_dtype, device=self.device)
        starts = torch.ones(self.rows, dtype=torch.bool, device=self.device)
        state = torch.zeros((self.rows, self.policy.state_size)) if self.recurrent else None
        with torch.inference_mode():
            self.act_policy.precompile(behaviour, obs, state, starts)

    def compile_copy(self) -> Trainer:
        """The trainer the background compile runs the update step on: a shallow copy of this
        one (its settings and sizes) with its own policy, optimizer and run context, and zero
        batches of the real shapes (``zero_batch``), so compiling changes nothing the run
        reads. The run takes its policy's parameters and optimizer over at the switch."""
        shadow = copy.copy(self)
        shadow.policy = copy.deepcopy(self.policy)
        shadow.optimizer = make_optimizer(
            self.args.optimizer, shadow.policy, self.args.learning_rate, eps=1e-5
        )
        rates_as_tensors(shadow.optimizer)  # the run takes this optimizer over at the switch
        shadow.ctx = dataclasses.replace(self.ctx, skipped=None, backups={})
        self.zero_batch(shadow)
        return shadow

    def zero_batch(self, shadow: Trainer) -> None:
        """Zero ``b_`` tensors of the real shapes on ``shadow`` (what ``prepare_batch`` views)."""
        obs_shape, n = self.env.obs_shape, self.batch_size
        shadow.b_obs = torch.zeros((n, *obs_shape), dtype=self.env.obs_dtype, device=self.device)
        shadow.b_actions = torch.zeros(n, dtype=torch.int64, device=self.device)
        for name in ("b_logprobs", "b_advantages", "b_returns", "b_values"):
            setattr(shadow, name, torch.zeros(n, device=self.device))
        if self.recurrent:
            shadow.b_states = torch.zeros((n, self.policy.state_size), device=self.device)
            shadow.b_starts = torch.ones(n, dtype=torch.bool, device=self.device)

    def adopt_compiled(self) -> None:
        """At the switch: train on the optimizer and parameter objects the update step was
        compiled on (holding this run's values), so it runs without compiling again."""
        shadow = self.__dict__.pop("compiled_on", None)
        if shadow is not None:
            self.optimizer = adopt_compiled(
                self.policy, self.optimizer, shadow.policy, shadow.optimizer
            )

    # --------------------------------------------------------------------------- ROLLOUT

    def graph_key(self, storage: Rollout) -> tuple:
        """What a captured horizon baked in (see ``GraphedCall``): the env's launch values and
        the acting policy's tensors."""
        return (self.env.params_version, tensor_addresses(self.behaviour))

    def update_key(self, _mb_slot=None) -> tuple:
        """What a captured minibatch step baked in (``graphs.update_key``)."""
        return update_key(self.policy, self.optimizer, self.b_obs)

    def rollout(self, storage: Rollout | None = None) -> None:
        """``num_steps`` steps of every env into ``storage`` (default: ``self.storage``),
        acting with ``self.behaviour``: one CUDA graph replay where ``setup_graphs`` made one."""
        self.run_steps(self.storage if storage is None else storage)

    def rollout_steps(self, s: Rollout) -> None:
        """The rollout's steps, launched one by one (what a CUDA graph captures)."""
        env, timers = self.env, self.timers
        with torch.inference_mode():
            for t in range(self.args.num_steps):
                t0 = time.perf_counter()
                # float32: a bf16 rollout forward measured ~15% slower end to end on the CPU
                state = s.states[t] if self.recurrent else None
                inputs = (s.obs[t], state, s.episode_starts[t])
                logits, value, state = self.act(self.act_policy, *inputs)
                if self.recurrent:
                    s.states[t + 1].copy_(state)
                for block, g in zip(self.blocks(self.noise), self.rollout_streams, strict=True):
                    torch.rand(block.shape, generator=g, device=self.device, out=block)
                # a sample of softmax(logits): the argmax of the logits plus Gumbel noise
                action = torch.argmax(logits - torch.log(-torch.log(self.noise)), dim=1)
                s.logprobs[t] = F.log_softmax(logits, dim=1).gather(1, action[:, None])[:, 0]
                s.actions[t] = action
                s.values[t] = value
                t1 = time.perf_counter()
                # actions come from an argmax over num_actions logits, so they are in range:
                # skip the check that would cost a host sync per step on cuda
                env.step(action, out=s.step_outputs[t], check=False)
                torch.logical_or(s.terminated[t], s.truncated[t], out=s.episode_starts[t + 1])
                t2 = time.perf_counter()
                timers.forward += t1 - t0
                timers.env += t2 - t1

    # --------------------------------------------------------------------------- ADVANTAGES

    def compute_advantages(self, storage: Rollout | None = None) -> None:
        """GAE over ``storage`` (default: ``self.storage``), with the acting policy's values."""
        s = self.storage if storage is None else storage
        t0 = time.perf_counter()
        with torch.inference_mode():
            state = s.states[-1] if self.recurrent else None
            inputs = (s.obs[-1], state, s.episode_starts[-1])
            s.last_values.copy_(self.act(self.act_policy, *inputs)[1])
            s.final_values.zero_()
            rows = s.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            for k, mine in self.member_groups(rows):
                # a recurrent policy sees final_obs[t] from the state step t reached, before
                # the restart the next step applies
                state = s.states[1:][mine] if self.recurrent else None
                s.final_values[mine] = self.member_net(k).value(s.final_obs[mine], state)
        s.compute_returns(self.device)
        self.timers.forward += time.perf_counter() - t0

    def collect(self, storage: Rollout) -> None:
        """A whole rollout into ``storage``: the steps, then its advantages."""
        self.rollout(storage)
        self.compute_advantages(storage)

    # --------------------------------------------------------------------------- UPDATE

    def member_orders(self, count: int, stride: int) -> torch.Tensor:
        """Each member's permutation of its ``count`` items (transitions, or sequences),
        drawn from its own stream as its solo run draws it, as flat storage indices: member
        ``k``'s item ``j`` is ``(j // n) * stride + k * n + j % n``; ``(count,)`` for one
        member."""
        dev = self.device
        orders = torch.stack(
            [torch.randperm(count, generator=g, device=dev) for g in self.generators]
        )
        members = torch.arange(self.num_members, device=dev)[:, None] * self.n
        return self.member_axis(orders // self.n * stride + members + orders % self.n)

    def minibatches(self):
        """Index tensors into the flattened time-major ``(num_steps * rows)`` batch, one per
        minibatch (a population's with the member axis first).

        Feed-forward policies draw transitions at random: ``(minibatch_size,)`` indices. A
        recurrent policy draws whole sequences, ``bptt_horizon`` consecutive steps of one row
        starting at a multiple of the horizon: ``(bptt_horizon, sequences)`` indices, so the
        loss replays each sequence from the state stored at its first step.
        """
        if not self.recurrent:
            order = self.member_orders(self.batch_size, self.rows)
            for start in range(0, self.batch_size, self.minibatch_size):
                yield order[..., start : start + self.minibatch_size]
            return
        first = self.member_orders(self.sequences, self.horizon * self.rows)
        steps = torch.arange(self.horizon, device=self.device)[:, None] * self.rows
        per = self.sequences_per_minibatch
        for start in range(0, self.sequences, per):
            yield steps + first[..., None, start : start + per]

    def minibatch_firsts(self) -> torch.Tensor:
        """Flat index of the first step of every recurrent sequence, in order: sequence
        j = (chunk j // rows, row j % rows) starts at chunk * horizon * rows + row."""
        order = torch.arange(self.sequences, device=self.device)
        return order // self.rows * (self.horizon * self.rows) + order % self.rows

    def evaluate_actions(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The current policy's logits ``(..., B, num_actions)`` and values ``(..., B)`` on
        minibatch ``mb``, its samples flattened on the last axis; recurrent sequences replay
        from stored states."""
        if not self.recurrent:
            logits, values, _ = self.policy(self.b_obs[mb])
            return logits, values
        initial = self.b_states[mb.select(self.member_dims, 0)]  # entering each first step
        logits, values = self.policy.unroll(self.b_obs[mb], initial, self.b_starts[mb])
        lead = mb.shape[: self.member_dims]
        return logits.reshape(*lead, -1, logits.shape[-1]), values.reshape(*lead, -1)

    def minibatch(self, flat: torch.Tensor, advantages=None) -> Batch:
        """The loss's samples ``flat`` (``normalised`` advantages, or ``advantages`` given: a
        chunk's, normalised over its whole minibatch)."""
        if advantages is None:
            advantages = self.b_advantages[flat]
            advantages = normalised(advantages) if self.args.norm_adv else advantages
        return Batch(
            self.b_actions[flat],
            self.b_logprobs[flat],
            advantages,
            self.b_returns[flat],
            self.b_values[flat],
        )

    def loss(self, mb, advantages=None) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO loss of minibatch ``mb`` and its stats (``ppo_loss``)."""
        with self.ctx.autocast():
            logits, new_values = self.evaluate_actions(mb)
        batch = self.minibatch(mb.flatten(self.member_dims), advantages)
        return ppo_loss(logits, new_values, batch, self.coefs, self.args.clip_vloss)

    def minibatch_step(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step on minibatch ``mb`` (loss, backward, clipping, the step; skipped
        when not finite); returns the loss stats. ``run.compile`` compiles it whole.

        With ``ppo.max_minibatch_size`` smaller than the minibatch, the minibatch is processed
        in ``k`` equal chunks (along its last index dimension: transitions, or whole sequences)
        whose gradients accumulate before the one step: each chunk's mean loss over k adds up to
        the whole minibatch's, its advantages normalised over the whole minibatch."""
        if self.chunk is None:
            loss, stats = self.loss(mb)
            losses = loss
        else:
            advantages = self.b_advantages[mb]
            if self.args.norm_adv:  # over the whole minibatch, shaped like mb
                advantages = normalised(advantages.reshape(-1)).reshape(mb.shape)
            chunks = (mb.split(self.chunk, -1), advantages.split(self.chunk, -1))
            parts = list(zip(*chunks, strict=True))
            k = len(parts)
            stats = torch.zeros(5, device=self.device)

            def chunk_losses():
                nonlocal stats
                for part, part_advantages in parts:
                    loss, part_stats = self.loss(part, part_advantages.reshape(-1))
                    stats = stats + part_stats / k
                    yield loss / k

            losses = chunk_losses()
        self.ctx.optimizer_step(
            self.optimizer, losses, self.policy.parameters(), self.max_grad_norm
        )
        return stats

    def prepare_batch(self) -> None:
        """Flat views of the rollout to learn from, ``b_`` prefixes as in CleanRL (no copies)."""
        s = self.storage
        T = self.args.num_steps
        self.b_obs = s.obs[:-1].reshape(T * self.rows, *self.env.obs_shape)
        self.b_actions = s.actions.reshape(-1)
        self.b_logprobs = s.logprobs.reshape(-1)
        self.b_advantages = s.advantages.reshape(-1)
        self.b_returns = s.returns.reshape(-1)
        self.b_values = s.values.reshape(-1)
        if self.recurrent:
            self.b_states = s.states[:-1].reshape(T * self.rows, -1)
            self.b_starts = s.episode_starts[:-1].reshape(-1)

    def update(self) -> list[dict]:
        """Every epoch's minibatch steps; returns each member's mean losses."""
        args = self.args
        t0 = time.perf_counter()
        if args.anneal_lr:
            self.set_learning_rates(self.scheduled_learning_rate)
        if args.anneal_ent:
            it, n = self.iteration, self.num_iterations
            self.set_coef(self.ent_coef, lambda a: annealed(a.ent_coef, it, n))
        self.prepare_batch()
        totals = torch.zeros((*self.member_shape, 5), device=self.device)  # LOSS_NAMES
        updates = 0
        for _epoch in range(args.update_epochs):
            for mb in self.minibatches():
                stats = self.learn_minibatch(mb)
                totals += stats
                updates += 1
            if args.target_kl > 0:  # one sync per epoch; every rank stops at the same epoch
                kl = stats[3].reshape(1).clone()
                if self.world > 1:
                    distributed.all_reduce_mean([kl], self.world)
                if float(kl) > args.target_kl:
                    break
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        return self.member_losses(LOSS_NAMES, totals, updates)

    def iterate(self) -> list[dict]:
        """One rollout, advantage pass and update; returns each member's losses."""
        if self.deferred is not None:  # the compiled steps from their fixed iteration on
            self.deferred.at(self.iteration)
        return self.collect_and_update()

    def collect_and_update(self) -> list[dict]:
        self.collect(self.storage)
        losses = self.update()
        self.global_step += self.steps_per_iteration  # each member's agent steps, all ranks
        self.storage.carry_over(self.storage)  # the next rollout starts where this one ended
        return losses

    # --------------------------------------------------------------------------- STATE

    def carried(self) -> dict[str, torch.Tensor]:
        """Where the next rollout starts: its observations, restart flags and, for a
        recurrent policy, the core's state of every row."""
        s = self.storage
        carried = {"next_obs": s.obs[0], "next_episode_starts": s.episode_starts[0]}
        if self.recurrent:
            carried["next_policy_state"] = s.states[0]
        return carried

    def check_member_state(self, k: int, state: dict) -> None:
        """The base's checks, a recurrent core's state and the overlap the state was written
        with."""
        saved = state.get("next_policy_state") if isinstance(state, dict) else None
        shape = (self.n, self.policy.state_size) if self.recurrent else None
        if self.recurrent and (not isinstance(saved, torch.Tensor) or tuple(saved.shape) != shape):
            raise ConfigError(
                f"checkpoint holds no recurrent state of this run's shape {shape}; resume it "
                "with the [model] it was written with"
            )
        overlapped = isinstance(state, dict) and "rollout_generator" in state
        if overlapped != self.args.overlap:
            raise ConfigError(
                f"checkpoint was written with ppo.overlap = {overlapped}; resume it with the same"
            )
        super().check_member_state(k, state)

"""PPO, CleanRL-style, reading the environment buffers without copies.

The environment writes each step's observations straight into the rollout storage slot
``obs[t + 1]`` (and final observations of ended episodes into ``final_obs[t]``), so the learner
never gathers or copies experience. Truncated steps bootstrap from the value of ``final_obs``.

Recurrent policies replay whole sequences from stored states; ``ppo.max_minibatch_size``
accumulates gradients over chunks of a minibatch. ``ppo.overlap`` (acting while learning, with
the decoupled objective) is the subclass in ``learners/ppo_overlap.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import torch
import torch.nn.functional as F

from fasttrain import distributed, savedstate
from fasttrain.compile import (
    DEFER_SHARE,
    CompiledStep,
    DeferredCompile,
    adopt_compiled,
    call_module,
)
from fasttrain.errors import ConfigError
from fasttrain.learners.actors import PolicyActor
from fasttrain.learners.base import (
    TrainerBase,
    check_memory,
    one_torch_thread,
    user_sizes,
    warn_once,
)
from fasttrain.learners.graphs import (
    graph_safe_optimizer,
    rollout_graph,
    run_rollout,
    setup_update_graph,
    tensor_addresses,
    update_key,
)
from fasttrain.learners.optim import (
    make_optimizer,
    rates_as_tensors,
    set_learning_rate,
)

# CONFIG: the [ppo] dataclass and its checks are in ppo_config.py (torch-free)
from fasttrain.learners.ppo_config import AUTO_COMPILE
from fasttrain.learners.rollout import Rollout, new_rollout
from fasttrain.models import make_policy

# ------------------------------------------------------------------------------- SETUP


class Trainer(TrainerBase):
    """Holds the environment, network, optimizer and rollout storage of one PPO run.

    ``Trainer(config)`` with ``ppo.overlap`` builds the overlapped subclass
    (``learners/ppo_overlap.py``), which names itself in ``overlapped`` when imported (the
    learner registry reaches this class through that module), so that this file need not
    import it."""

    overlapped: type | None = None

    def __new__(cls, config=None, warn=print):
        if cls is Trainer and config is not None and config.learner.overlap:
            if Trainer.overlapped is None:  # never silently plain PPO
                raise RuntimeError("ppo.overlap needs fasttrain.learners.ppo_overlap imported")
            cls = Trainer.overlapped
        return super().__new__(cls)

    def __init__(self, config, warn=print):
        self.args = args = config.learner
        super().__init__(config, args.num_envs)
        with user_sizes(f"the model (model.hidden = {config.model.hidden})"), one_torch_thread():
            self.policy = self.make_policy()
        self.share_weights(self.policy)
        self.fit_threads(self.policy)
        self.optimizer = make_optimizer(args.optimizer, self.policy, args.learning_rate, eps=1e-5)
        self.batch_size = self.rows * args.num_steps  # per rank
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.steps_per_iteration)
        self.recurrent = self.policy.is_recurrent
        self.plan_minibatches()
        check_memory(self.storage_bytes(), "PPO rollout storage", self.device)
        self.storage = self.new_rollout()
        self.storage.obs[0].copy_(self.env.obs)
        # a tensor, so annealing it (ppo.anneal_ent) changes no compiled graph
        self.ent_coef = torch.tensor(float(args.ent_coef), device=self.device)
        warn_always, warn = warn, warn_once(warn)  # one compile warning for both steps
        self.compile_mode = self.compile_mode_for(AUTO_COMPILE, recurrent=self.recurrent)
        self.train_step = CompiledStep(Trainer._train_step, self, self.compile_mode, warn)
        self.setup_behaviour()
        self.act_policy = CompiledStep(
            call_module, self.behaviour, self.compile_mode, warn, "the network"
        )
        self.deferred = self.compile_in_background(warn_always)
        self.setup_graph(warn_always)

    def setup_behaviour(self) -> None:
        """The policy that acts and the random stream it samples from: the learner's own
        (``ppo_overlap`` acts with a copy of the weights from before the update)."""
        self.behaviour, self.rollout_generator = self.policy, self.generator

    def make_policy(self):
        env = self.env
        return make_policy(
            env.obs_shape,
            env.obs_dtype,
            env.num_actions,
            self.config.model,
            self.device,
            env.spec.obs_categories,
        )

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
            self.sequences = args.num_steps // self.horizon * self.rows
            self.sequences_per_minibatch = self.sequences // args.num_minibatches
            if self.chunk is not None:
                self.chunk //= self.horizon

    def storage_bytes(self) -> int:
        """Bytes of one rollout's storage, checked before allocating it."""
        T, N, env = self.args.num_steps, self.rows, self.env
        state_size = self.policy.state_size if self.recurrent else 0
        obs_bytes = env.obs_dtype.itemsize * math.prod(env.obs_shape)
        return (2 * T + 1) * N * obs_bytes + T * N * 36 + (T + 1) * N * state_size * 4

    def new_rollout(self) -> Rollout:
        """Zeroed storage for one rollout, its env outputs and advantage kernel bound once."""
        state_size = self.policy.state_size if self.recurrent else None
        backend = self.ctx.device.backend
        return new_rollout(self.env, self.args, self.rows, state_size, self.device, backend)

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
        deferred = DeferredCompile(steps, switch_at, say=say, adopt=self.adopt_compiled)
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

    def setup_graph(self, warn) -> None:
        """On cuda (``run.cuda_graph``), the rollout horizon as one CUDA graph
        (``learners/graphs.py``); where it cannot be captured, one line says why and the
        rollout runs eagerly."""
        self.horizon_graph = rollout_graph(
            self.config, self.device, self.rollout_steps, self.graph_key,
            [self.rollout_generator], self.env, warn, self.compile_mode,
        )  # fmt: skip
        self.update_graph = setup_update_graph(
            self, self.config, self._train_step, self.update_key, warn
        )

    def graph_key(self, storage: Rollout) -> tuple:
        """What a captured horizon baked in (see ``GraphedCall``): the env's launch values and
        the acting policy's tensors."""
        return (self.env.params_version, tensor_addresses(self.behaviour))

    def update_key(self, _mb_slot=None) -> tuple:
        """What a captured minibatch step baked in (``graphs.update_key``)."""
        return update_key(self.policy, self.optimizer, self.b_obs)

    def learn_minibatch(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step on minibatch ``mb``; returns the loss stats: a CUDA graph replay
        where ``setup_graph`` made one."""
        if self.update_graph is None:
            return self.train_step(mb)
        return self.update_graph(mb)

    def rollout(self, storage: Rollout | None = None) -> None:
        """``num_steps`` steps of every env into ``storage`` (default: ``self.storage``),
        acting with ``self.behaviour``: one CUDA graph replay where ``setup_graph`` made one."""
        s = self.storage if storage is None else storage
        run_rollout(self.horizon_graph, self.rollout_steps, s, self.timers)

    def rollout_steps(self, s: Rollout) -> None:
        """The rollout's steps, launched one by one (what a CUDA graph captures)."""
        env, args, timers = self.env, self.args, self.timers
        with torch.inference_mode():
            for t in range(args.num_steps):
                t0 = time.perf_counter()
                # float32: a bf16 rollout forward measured ~15% slower end to end on the CPU
                state = s.states[t] if self.recurrent else None
                logits, value, state = self.act_policy(s.obs[t], state, s.episode_starts[t])
                if self.recurrent:
                    s.states[t + 1].copy_(state)
                noise = torch.rand(
                    logits.shape, generator=self.rollout_generator, device=self.device
                )
                gumbel = -torch.log(-torch.log(noise))
                action = torch.argmax(logits + gumbel, dim=1)  # a sample of softmax(logits)
                s.logprobs[t] = F.log_softmax(logits, dim=1).gather(1, action[:, None])[:, 0]
                s.actions[t] = action
                s.values[t] = value
                t1 = time.perf_counter()
                # actions come from an argmax over num_actions logits, so they are in range:
                # skip the check that would cost a host sync per step on cuda
                env.step(action, out=s.step_outputs[t], check=False)
                s.rewards[t] = env.rewards
                s.terminated[t] = env.terminated
                s.truncated[t] = env.truncated
                torch.logical_or(env.terminated, env.truncated, out=s.episode_starts[t + 1])
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
            s.last_values.copy_(self.act_policy(s.obs[-1], state, s.episode_starts[-1])[1])
            s.final_values.zero_()
            rows = s.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            if rows[0].numel():
                # a recurrent policy sees final_obs[t] from the state step t reached, before
                # the restart the next step applies
                state = s.states[1:][rows] if self.recurrent else None
                s.final_values[rows] = self.behaviour.value(s.final_obs[rows], state)
        stream = 0
        if self.device.type == "cuda":  # launch on torch's stream, ordered with the learner
            stream = torch.cuda.current_stream(self.device).cuda_stream
        s.gae(stream=stream)
        self.timers.forward += time.perf_counter() - t0

    def collect(self, storage: Rollout) -> None:
        """A whole rollout into ``storage``: the steps, then its advantages."""
        self.rollout(storage)
        self.compute_advantages(storage)

    # --------------------------------------------------------------------------- UPDATE

    def minibatches(self):
        """Index tensors into the flattened time-major ``(num_steps * rows)`` batch, one per
        minibatch.

        Feed-forward policies draw transitions at random: ``(minibatch_size,)`` indices. A
        recurrent policy draws whole sequences, ``bptt_horizon`` consecutive steps of one row
        starting at a multiple of the horizon: ``(bptt_horizon, sequences)`` indices, so the
        loss replays each sequence from the state stored at its first step.
        """
        if not self.recurrent:
            order = torch.randperm(self.batch_size, generator=self.generator, device=self.device)
            for start in range(0, self.batch_size, self.minibatch_size):
                yield order[start : start + self.minibatch_size]
            return
        order = torch.randperm(self.sequences, generator=self.generator, device=self.device)
        first = self.minibatch_firsts(order)
        steps = torch.arange(self.horizon, device=self.device)[:, None] * self.rows
        per = self.sequences_per_minibatch
        for start in range(0, self.sequences, per):
            yield steps + first[None, start : start + per]

    def evaluate_actions(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The current policy's logits ``(B, num_actions)`` and values ``(B,)`` on minibatch
        ``mb``, in ``mb.reshape(-1)`` order; recurrent sequences replay from stored states."""
        if not self.recurrent:
            logits, values, _ = self.policy(self.b_obs[mb])
            return logits, values
        initial = self.b_states[mb[0]]  # the state entering each sequence's first step
        logits, values = self.policy.unroll(self.b_obs[mb], initial, self.b_starts[mb])
        return logits.reshape(-1, logits.shape[-1]), values.reshape(-1)

    def loss(self, mb, advantages=None) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO loss of minibatch ``mb`` (every term a mean over its samples) and its stats
        ``[pg, v, entropy, approx_kl, clipfrac]``. ``advantages``: the samples' advantages,
        already normalised (a chunk of a larger minibatch, normalised over the whole of it);
        None: read and normalised here."""
        args = self.args
        with self.ctx.autocast():
            logits, new_values = self.evaluate_actions(mb)
        logits, new_values = logits.float(), new_values.float()
        mb = mb.reshape(-1)
        log_probs = F.log_softmax(logits, dim=1)
        new_logprob = log_probs.gather(1, self.b_actions[mb][:, None])[:, 0]
        entropy = -(log_probs.exp() * log_probs).sum(1).mean()
        mb_adv = self.normalised(self.b_advantages[mb]) if advantages is None else advantages
        log_ratio, weight = self.policy_ratio(mb, new_logprob)
        ratio = log_ratio.exp()
        pg_loss = (
            weight
            * torch.max(
                -mb_adv * ratio, -mb_adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            )
        ).mean()
        b_values, b_returns = self.b_values[mb], self.b_returns[mb]
        if args.clip_vloss:
            clipped = b_values + (new_values - b_values).clamp(-args.clip_coef, args.clip_coef)
            v_loss = (
                0.5 * torch.max((new_values - b_returns) ** 2, (clipped - b_returns) ** 2).mean()
            )
        else:
            v_loss = 0.5 * ((new_values - b_returns) ** 2).mean()
        loss = pg_loss - self.ent_coef * entropy + args.vf_coef * v_loss
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
            clipfrac = ((ratio - 1).abs() > args.clip_coef).float().mean()
            stats = torch.stack([pg_loss, v_loss, entropy, approx_kl, clipfrac]).detach()
        return loss, stats

    def policy_ratio(self, mb, new_logprob) -> tuple[torch.Tensor, torch.Tensor | float]:
        """The log of the clipped ratio and each sample's weight: against the policy that
        acted, every sample weighing 1 (``ppo_overlap`` takes it against the proximal policy)."""
        return new_logprob - self.b_logprobs[mb], 1.0

    def normalised(self, advantages: torch.Tensor) -> torch.Tensor:
        """A minibatch's advantages, normalised to mean 0 and std 1 where ``ppo.norm_adv``."""
        if not self.args.norm_adv:
            return advantages
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def _train_step(self, mb: torch.Tensor) -> torch.Tensor:
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
            advantages = self.normalised(self.b_advantages[mb])  # shaped like mb
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
            self.optimizer, losses, self.policy.parameters(), self.args.max_grad_norm
        )
        return stats

    def prepare_batch(self) -> None:
        """Flat views of the rollout to learn from, ``b_`` prefixes as in CleanRL (no copies)."""
        s = self.storage
        self.b_obs = s.obs[:-1].reshape(self.batch_size, *self.env.obs_shape)
        self.b_actions = s.actions.reshape(-1)
        self.b_logprobs = s.logprobs.reshape(-1)
        self.b_advantages = s.advantages.reshape(-1)
        self.b_returns = s.returns.reshape(-1)
        self.b_values = s.values.reshape(-1)
        if self.recurrent:
            self.b_states = s.states[:-1].reshape(self.batch_size, -1)
            self.b_starts = s.episode_starts[:-1].reshape(-1)

    def minibatch_firsts(self, order: torch.Tensor | None = None) -> torch.Tensor:
        """Flat index of the first step of recurrent sequences ``order`` (default: all, in
        order): sequence j = (chunk j // rows, row j % rows) starts at chunk*horizon*rows+row."""
        if order is None:
            order = torch.arange(self.sequences, device=self.device)
        return order // self.rows * (self.horizon * self.rows) + order % self.rows

    def update(self) -> dict:
        args = self.args
        t0 = time.perf_counter()
        frac = 1.0 - self.iteration / self.num_iterations  # of the schedules' values left
        if args.anneal_lr:
            set_learning_rate(self.optimizer, frac * args.learning_rate)
        if args.anneal_ent:
            self.ent_coef.fill_(frac * args.ent_coef)
        self.prepare_batch()
        totals = torch.zeros(5, device=self.device)  # pg, v, entropy, approx_kl, clipfrac
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
        skipped = self.ctx.take_skipped().to(totals.dtype)
        means = torch.cat([totals / updates, skipped.view(1)]).tolist()  # the one host sync
        names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "skipped_updates")
        return {f"losses/{k}": v for k, v in zip(names, means, strict=True)}

    def iterate(self) -> dict:
        """One rollout, advantage pass and update; returns the update's losses."""
        if self.deferred is not None:  # the compiled steps from their fixed iteration on
            self.deferred.at(self.iteration)
        return self.collect_and_update()

    def collect_and_update(self) -> dict:
        self.collect(self.storage)
        losses = self.update()
        self.global_step += self.steps_per_iteration  # agent steps, all ranks
        self.storage.carry_over(self.storage)  # the next rollout starts where this one ended
        return losses

    # --------------------------------------------------------------------------- STATE

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit."""
        s = self.storage
        state = {
            **self.base_state(),
            "model": self.policy.state_dict(),
            "next_obs": s.obs[0].cpu().clone(),
            "next_episode_starts": s.episode_starts[0].cpu().clone(),
        }
        if self.recurrent:  # the core's state of every row, where the next rollout starts
            state["next_policy_state"] = s.states[0].cpu().clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.check_state(state)  # nothing changes on a mismatch
        s = self.storage
        saved = state.get("next_policy_state")
        if self.recurrent and (
            not isinstance(saved, torch.Tensor) or tuple(saved.shape) != tuple(s.states[0].shape)
        ):
            raise ConfigError(
                "checkpoint holds no recurrent state of this run's shape "
                f"{tuple(s.states[0].shape)}; resume it with the [model] it was written with"
            )
        overlapped = "rollout_generator" in state
        if overlapped != self.args.overlap:
            raise ConfigError(
                f"checkpoint was written with ppo.overlap = {overlapped}; resume it with the same"
            )
        self.check_rollout_state(state)
        self.load_base_state(state)
        if self.rates_on_device:  # the loaded rates as the fused Adam reads them on cuda
            graph_safe_optimizer(self.optimizer, self.device)
        self.policy.load_state_dict(state["model"])
        if self.recurrent:
            s.states[0].copy_(saved)
        s.obs[0].copy_(state["next_obs"])
        if "next_episode_starts" in state:
            s.episode_starts[0].copy_(state["next_episode_starts"])

    def check_rollout_state(self, state: dict) -> None:
        """The weights and the rollout's starting point a checkpoint holds, against this
        run's (``fasttrain.savedstate``): one line for the first that does not fit."""
        s = self.storage
        savedstate.weights(
            savedstate.field(state, "model", "network weights"), "model", self.policy
        )
        obs = savedstate.field(state, "next_obs", "observations")
        savedstate.like(obs, "next_obs", s.obs[0], self.env.spec.obs_categories)
        if "next_episode_starts" in state:
            starts = state["next_episode_starts"]
            savedstate.like(starts, "next_episode_starts", s.episode_starts[0])
        if self.recurrent:
            savedstate.like(state["next_policy_state"], "next_policy_state", s.states[0])


def actor(
    config,
    obs_shape,
    obs_dtype,
    num_actions: int,
    model_state: dict,
    obs_categories: int = 0,
    greedy: bool = True,
    seed: int = 0,
) -> PolicyActor:
    """The ``PolicyActor`` of trained weights: the most likely action, or with
    ``greedy=False`` a sample of the policy (seeded with ``seed``)."""
    policy = make_policy(
        obs_shape, obs_dtype, num_actions, config.model, obs_categories=obs_categories
    )
    policy.load_state_dict(model_state)
    policy.eval()
    return PolicyActor(policy, greedy, seed)


# ------------------------------------------------------------------------------- BENCHMARK


def ceiling(trainer: Trainer, updates: int = 3) -> float:
    """Samples/s of the update alone: the same PPO update (every epoch and minibatch of the
    loss, backward and optimizer step) on the trainer's rollout storage, without the rollout."""
    if trainer.global_step == 0:  # storage to learn from
        trainer.iterate()
    trainer.update()  # warm-up
    iteration = trainer.iteration
    start = time.perf_counter()
    for _ in range(updates):
        trainer.update()
    seconds_per_update = (time.perf_counter() - start) / updates
    trainer.iteration = iteration  # the learning-rate schedule did not move
    return trainer.batch_size / seconds_per_update

"""PPO for a population: ``M`` members, one per seed, trained side by side in one process as
each would train alone (issue 53).

The members' environments, networks, random streams and optimizer are ``population_base``'s.
Each member draws from its own stream what the solo trainer draws, in the same order (sampling
noise, then its minibatch order), so member ``k`` sees the same observations, takes the same
actions and makes the same update as the solo run with ``run.seed = seeds[k]``, up to the float
rounding of batched matrix products (checked in ``tests/fasttrain/learners/
test_ppo_population.py``). An MLP's forward runs as batched matrix products, any other network
under ``vmap``; members may differ in ``VARIABLE`` (the advantage kernel then reads a
discount and a trace decay per column).

Feed-forward and recurrent PPO (``model.core``: sequences replayed from their stored states,
as the solo trainer) on single-agent games; ``fasttrain/population_run.py`` gives it its run
directory (``fasttrain run --seeds``).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fasttrain.learners import population_base
from fasttrain.learners.base import check_memory
from fasttrain.learners.population_base import PopulationBase
from fasttrain.learners.ppo_config import POPULATION_VARIABLE
from fasttrain.learners.rollout import new_rollout

LOSS_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


def population_problem(config) -> str | None:
    """None where ``config`` can train as a population here, else why not (one line)."""
    problem = population_base.learner_problem(config, "ppo")
    if problem:
        return problem
    args = config.learner
    if args.overlap:
        return "a population does not overlap its rollouts: ppo.overlap = false"
    if args.target_kl > 0:
        return "a population's members stop their epochs together: ppo.target_kl = 0"
    if 0 < args.max_minibatch_size < args.num_envs * args.num_steps // args.num_minibatches:
        return "a population's minibatches are whole: ppo.max_minibatch_size = 0"
    return None


VARIABLE = POPULATION_VARIABLE  # the settings members may differ in


def variants_problem(config, member_configs) -> str | None:
    """None where every member config differs from ``config`` only in its seed and in
    ``VARIABLE`` learner settings, else the first other difference (one line)."""
    return population_base.variants_problem(config, member_configs, VARIABLE)


class PopulationTrainer(PopulationBase):
    """``len(seeds)`` PPO members trained side by side; ``iterate()`` returns each member's
    losses, ``member_stats()`` each member's episode means."""

    ALGO = "ppo"
    VARIABLE = VARIABLE
    problem = staticmethod(population_problem)

    def __init__(self, config, seeds, member_configs=None, warn=print):
        super().__init__(config, seeds, member_configs)
        args, env, M = self.args, self.env, self.num_members
        clip = self.each("clip_coef", torch.float64)  # the ratio's bounds as a float's, in float64
        self.clip = clip.float()
        self.ratio_low, self.ratio_high = (1 - clip).float(), (1 + clip).float()
        self.vf_coef = self.each("vf_coef")
        self.ent_coefs = self.each("ent_coef")  # the schedule's start, per member
        self.batch_size = args.num_envs * args.num_steps  # per member
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.batch_size)
        # a recurrent policy learns from whole sequences of bptt_horizon steps of one row, each
        # replayed from the state stored at its first step (as ppo.Trainer.plan_minibatches)
        self.recurrent = self.template.is_recurrent
        state_size = self.template.state_size if self.recurrent else None
        if self.recurrent:
            self.horizon = args.bptt_horizon
            self.sequences = args.num_steps // self.horizon * self.n  # per member
            self.sequences_per_minibatch = self.sequences // args.num_minibatches
        T, obs_bytes = args.num_steps, env.obs_dtype.itemsize * math.prod(env.obs_shape)
        state_bytes = (T + 1) * self.rows * (state_size or 0) * 4
        check_memory((2 * T + 1) * self.rows * obs_bytes + T * self.rows * 36 + state_bytes,
                     f"the population's rollout storage ({M} members)", self.device)  # fmt: skip
        backend = self.ctx.device.backend
        self.storage = new_rollout(env, args, self.rows, state_size, self.device, backend)
        self.storage.obs[0].copy_(env.obs)
        if len({(a.gamma, a.gae_lambda) for a in self.member_args}) > 1:
            self.storage.gae = self.member_gae(backend)
        self.ent_coef = self.ent_coefs.clone()  # annealed in place (ppo.anneal_ent)
        # the rollout's sampling noise, (M, n, actions), filled in place at every step
        self.noise = torch.empty((M, self.n, env.num_actions), device=self.device)
        # on cuda (run.cuda_graph) the rollout horizon as one CUDA graph, every member's
        # sampling stream registered with it (learners/graphs.py); the update runs eagerly
        self.horizon_graph = self.rollout_graph(self.generators, warn)

    # ------------------------------------------------------------------------------ ROLLOUT

    def rollout(self) -> None:
        """``num_steps`` steps of every member's envs, each acting with its own policy and
        sampling noise from its own stream (as its solo run: ``ppo.Trainer.rollout_steps``):
        one CUDA graph replay where there is one."""
        self.run_steps(self.storage)

    def rollout_steps(self, s) -> None:
        """The rollout's steps into storage ``s``, launched one by one (what a graph captures)."""
        env = self.env
        with torch.inference_mode():
            for t in range(self.args.num_steps):
                t0 = time.perf_counter()
                logits, value, state = self.population(*self.inputs(t))  # (M, n, A)
                if self.recurrent:
                    s.states[t + 1].copy_(state.reshape(self.rows, -1))
                noise = self.noise  # each member's draws from its own stream, in place
                for k, g in enumerate(self.generators):
                    torch.rand(logits.shape[1:], generator=g, device=self.device, out=noise[k])
                action = torch.argmax(logits - torch.log(-torch.log(noise)), dim=2)  # (M, n)
                logprob = F.log_softmax(logits, dim=2).gather(2, action[..., None])[..., 0]
                s.logprobs[t] = logprob.reshape(-1)
                s.actions[t] = action.reshape(-1)
                s.values[t] = value.reshape(-1)
                t1 = time.perf_counter()
                env.step(s.actions[t], out=s.step_outputs[t], check=False)
                s.rewards[t] = env.rewards
                s.terminated[t] = env.terminated
                s.truncated[t] = env.truncated
                torch.logical_or(env.terminated, env.truncated, out=s.episode_starts[t + 1])
                self.timers.forward += t1 - t0
                self.timers.env += time.perf_counter() - t1

    def inputs(self, t: int) -> tuple:
        """The policies' inputs at rollout step ``t``, by member: the observations, and for a
        recurrent policy the states and restart flags."""
        s = self.storage
        if not self.recurrent:
            return (self.by_member(s.obs[t]),)
        return tuple(self.by_member(x[t]) for x in (s.obs, s.states, s.episode_starts))

    def member_values(self, k: int, obs: torch.Tensor, state=None) -> torch.Tensor:
        """Member ``k``'s values of ``obs`` (B, *obs_shape), from ``state`` (B, state_size)
        where its policy is recurrent."""
        if not self.recurrent:
            return self.member_call(k, obs)[1]
        return self.member_call(k, obs, state, method="value")

    def member_gae(self, backend: str):
        """The advantage kernel with each member's ``gamma`` and ``gae_lambda`` on its columns
        (``kernels.gae.GAE_COLUMNS``), bound once as the solo's ``GAE``."""
        from fasttrain.kernels.gae import GAE_COLUMNS

        s = self.storage

        gammas, lambdas = (self.each(name, torch.float64).repeat_interleave(self.n)
                           for name in ("gamma", "gae_lambda"))  # fmt: skip
        self._gae_settings = (gammas, lambdas)  # the kernel reads them at every launch
        arrays = (s.rewards, s.values, s.last_values, s.final_values, s.terminated, s.truncated,
                  gammas, lambdas, s.advantages, s.returns)  # fmt: skip
        if backend == "cpu":  # CPU tensors as NumPy views
            arrays = tuple(a.numpy() for a in arrays)
        return GAE_COLUMNS.bind(backend, arrays)

    def compute_advantages(self) -> None:
        """GAE over every member's columns, with the values each member's policy gave."""
        s = self.storage
        t0 = time.perf_counter()
        with torch.inference_mode():
            s.last_values.copy_(self.population(*self.inputs(-1))[1].reshape(-1))
            s.final_values.zero_()
            rows = s.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            for k in torch.unique(rows[1] // self.n).tolist() if rows[0].numel() else []:
                mine = tuple(r[rows[1] // self.n == k] for r in rows)
                # a recurrent policy sees final_obs[t] from the state step t reached
                state = s.states[1:][mine] if self.recurrent else None
                s.final_values[mine] = self.member_values(k, s.final_obs[mine], state)
        stream = 0
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        s.gae(stream=stream)
        self.timers.forward += time.perf_counter() - t0

    # ------------------------------------------------------------------------------ UPDATE

    def sequence_orders(self) -> torch.Tensor:
        """Each member's order of its recurrent sequences, drawn from its own stream as the
        solo run draws it, as flat storage indices of their steps: ``(M, horizon,
        sequences)`` (``ppo.Trainer.minibatches``)."""
        orders = torch.stack(
            [torch.randperm(self.sequences, generator=g, device=self.device)
             for g in self.generators]
        )  # fmt: skip
        # member k's sequence j starts at step (j // n) * horizon of its column k * n + j % n
        members = torch.arange(self.num_members, device=self.device)[:, None]
        first = orders // self.n * (self.horizon * self.rows) + members * self.n + orders % self.n
        steps = torch.arange(self.horizon, device=self.device)[:, None] * self.rows
        return steps[None] + first[:, None, :]

    def losses(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's PPO loss on its minibatch ``mb`` (M, B) of flat storage indices
        (recurrent: (M, horizon, sequences)): ``(M,)`` losses and ``(M, 5)`` stats
        (``LOSS_NAMES``), each as ``ppo.Trainer.loss``."""
        s = self.storage
        obs = s.obs[:-1].reshape(-1, *self.env.obs_shape)[mb]  # (M, B, *obs_shape)
        flat = mb.reshape(self.num_members, -1)
        batch = [getattr(s, name).reshape(-1)[flat] for name in
                 ("actions", "logprobs", "advantages", "returns", "values")]  # fmt: skip
        coefs = (self.clip, self.ratio_low, self.ratio_high, self.ent_coef, self.vf_coef)
        population = self.population
        if self.recurrent:  # each sequence replayed from its stored state, every member at once
            initial = s.states[:-1].reshape(self.batch_size * self.num_members, -1)[mb[:, 0]]
            starts = s.episode_starts[:-1].reshape(-1)[mb]
            with self.autocast():
                logits, new_values = population.call("unroll", obs, initial, starts)
            logits = logits.reshape(self.num_members, -1, logits.shape[-1])
            per_sample = [c[:, None] for c in coefs[:3]]
            return self.ppo_loss(logits, new_values.reshape(self.num_members, -1), *batch,
                                 *per_sample, *coefs[3:])  # fmt: skip
        if population._plan is not None:  # an MLP: batched products, every member at once
            with self.autocast():
                logits, new_values, _ = population(obs)
            per_sample = [c[:, None] for c in coefs[:3]]  # against (M, B) samples
            return self.ppo_loss(logits, new_values, *batch, *per_sample, *coefs[3:])
        base = population._base[0]
        weights = dict(population.stacked.named_parameters())
        buffers = dict(population.stacked.named_buffers())

        def one(p, b, obs, *rest):
            with self.autocast():
                logits, new_values, _ = functional_call(base, (p, b), (obs,))
            return self.ppo_loss(logits, new_values, *rest)

        return vmap(one)(weights, buffers, obs, *batch, *coefs)

    def ppo_loss(
        self,
        logits,
        new_values,
        actions,
        old_logprobs,
        advantages,
        returns,
        old_values,
        clip,
        ratio_low,
        ratio_high,
        ent_coef,
        vf_coef,
    ):
        """``ppo.Trainer.loss``'s arithmetic over the samples on the last axis (a member's, or
        every member's with the member axis first), with each member's coefficients (the clip
        range and its ratio bounds shaped against the samples): the loss and its stats."""
        args = self.args
        logits, new_values = logits.float(), new_values.float()
        log_probs = F.log_softmax(logits, dim=-1)
        new_logprob = log_probs.gather(-1, actions[..., None])[..., 0]
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean(-1)
        if args.norm_adv:
            mean, std = advantages.mean(-1, keepdim=True), advantages.std(-1, keepdim=True)
            advantages = (advantages - mean) / (std + 1e-8)
        log_ratio = new_logprob - old_logprobs
        ratio = log_ratio.exp()
        clipped_ratio = torch.clamp(ratio, ratio_low, ratio_high)
        pg_loss = torch.max(-advantages * ratio, -advantages * clipped_ratio).mean(-1)
        if args.clip_vloss:
            clipped = old_values + torch.clamp(new_values - old_values, -clip, clip)
            v_loss = 0.5 * torch.max((new_values - returns) ** 2, (clipped - returns) ** 2)
            v_loss = v_loss.mean(-1)
        else:
            v_loss = 0.5 * ((new_values - returns) ** 2).mean(-1)
        loss = pg_loss - ent_coef * entropy + vf_coef * v_loss
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean(-1)
            clipfrac = ((ratio - 1).abs() > clip).float().mean(-1)
        stats = torch.stack([pg_loss, v_loss, entropy, approx_kl, clipfrac], dim=-1).detach()
        return loss, stats

    def update(self) -> torch.Tensor:
        """Every member's epochs of minibatch steps; returns the mean stats, ``(M, 5)``."""
        args = self.args
        t0 = time.perf_counter()
        frac = 1.0 - self.iteration / self.num_iterations
        if args.anneal_lr:
            self.optimizer.set_learning_rates(frac * self.lrs)
        if args.anneal_ent:
            self.ent_coef.copy_(frac * self.ent_coefs)
        means = self.minibatch_steps(len(LOSS_NAMES))
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        return means

    def orders(self) -> tuple[torch.Tensor, int]:
        """An epoch's minibatch orders and their size: whole sequences for a recurrent
        policy (``sequence_orders``), transitions otherwise."""
        if self.recurrent:
            return self.sequence_orders(), self.sequences_per_minibatch
        return super().orders()

    def iterate(self) -> list[dict]:
        """One rollout, advantage pass and update of every member; returns each member's
        losses (``losses/...`` keys, with the updates it skipped in this iteration)."""
        self.rollout()
        self.compute_advantages()
        before = self.optimizer.skipped.clone()
        means = self.update().tolist()  # the one host sync
        self.global_step += self.batch_size  # each member's agent steps
        self.storage.carry_over(self.storage)
        skipped = (self.optimizer.skipped - before).tolist()  # this iteration's, as solo
        return [
            {
                **{f"losses/{n}": v for n, v in zip(LOSS_NAMES, row, strict=True)},
                "losses/skipped_updates": skipped[k],
            }  # fmt: skip
            for k, row in enumerate(means)
        ]

    # ------------------------------------------------------------------------------ STATE

    def carried(self) -> dict[str, torch.Tensor]:
        """Where the next rollout starts: its observations and episode-start flags."""
        s = self.storage
        carried = {"next_obs": s.obs[0], "next_episode_starts": s.episode_starts[0]}
        if self.recurrent:  # the core's state of every row
            carried["next_policy_state"] = s.states[0]
        return carried

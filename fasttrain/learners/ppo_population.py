"""PPO for a population: ``M`` members, one per seed, trained side by side in one process as
each would train alone (issue 53).

The members' environments are one buffer of ``M * num_envs`` rows, block ``k`` seeded as the
solo run with ``seeds[k]`` (``fasttrain.make(seed=[...])``); their networks are one
``Population`` (stacked weights, one batched forward); their optimizer is one ``PopulationAdam``
(a step count, moments and learning rate per member, each member's gradient clipped by its own
norm, a non-finite member skipped alone). Each member keeps its own random stream, seeded as its
solo run's, and draws from it what the solo trainer draws, in the same order (sampling noise,
then its minibatch order), so member ``k`` sees the same observations, takes the same actions
and makes the same update as the solo run with ``run.seed = seeds[k]``, up to the float
rounding of batched matrix products (checked in ``tests/fasttrain/learners/
test_ppo_population.py``).

Feed-forward PPO on single-agent games, every member with the same settings;
``fasttrain/population_run.py`` gives it its run directory (``fasttrain run --seeds``).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fasttrain import distributed
from fasttrain.errors import ConfigError
from fasttrain.kernels.env import check_seeds
from fasttrain.learners.base import Timers, check_memory, start_run
from fasttrain.learners.optim import adam
from fasttrain.learners.rollout import new_rollout
from fasttrain.population import Population, build_members
from fasttrain.population_optim import PopulationAdam, population_step

LOSS_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


def population_problem(config) -> str | None:
    """None where ``config`` can train as a population here, else why not (one line)."""
    args = config.learner
    if config.run.algo != "ppo":
        return f"a PPO population needs run.algo = 'ppo', got {config.run.algo!r}"
    if config.model.core != "none":
        return "a population's PPO is feed-forward for now: model.core = 'none'"
    if args.overlap:
        return "a population does not overlap its rollouts: ppo.overlap = false"
    if args.target_kl > 0:
        return "a population's members stop their epochs together: ppo.target_kl = 0"
    if args.optimizer != "adam":
        return f"a population steps Adam, not ppo.optimizer = {args.optimizer!r}"
    if 0 < args.max_minibatch_size < args.num_envs * args.num_steps // args.num_minibatches:
        return "a population's minibatches are whole: ppo.max_minibatch_size = 0"
    if config.run.amp == "fp16":
        return "a population has no fp16 loss scaler: run.amp = 'off' or 'bf16'"
    return None


# the settings members may differ in: learner scalars that change no buffer, network or kernel
VARIABLE = (
    "learning_rate",
    "ent_coef",
    "vf_coef",
    "clip_coef",
    "max_grad_norm",
    "gamma",
    "gae_lambda",
)


def variants_problem(config, member_configs) -> str | None:
    """None where every member config differs from ``config`` only in its seed and in
    ``VARIABLE`` learner settings, else the first other difference (one line)."""
    import dataclasses

    def settings(c):
        out = {f"run.{k}": v for k, v in dataclasses.asdict(c.run).items() if k != "seed"}
        out.update({f"model.{k}": v for k, v in dataclasses.asdict(c.model).items()})
        out.update({f"game.{c.game.name}.{k}": v for k, v in vars(c.params).items()})
        algo = c.run.algo
        learner = dataclasses.asdict(c.learner)
        out.update({f"{algo}.{k}": v for k, v in learner.items() if k not in VARIABLE})
        out["game"] = c.game.name
        return out

    base = settings(config)
    for member in member_configs:
        theirs = settings(member)
        for key in sorted(set(base) | set(theirs)):
            if base.get(key) != theirs.get(key):
                allowed = ", ".join(f"{config.run.algo}.{k}" for k in VARIABLE)
                return f"members differ in {key}: a population's members may vary only {allowed}"
    return None


class PopulationTrainer:
    """``len(seeds)`` PPO members trained side by side; ``iterate()`` returns each member's
    losses, ``member_stats()`` each member's episode means."""

    def __init__(self, config, seeds, member_configs=None):
        problem = population_problem(config)
        if problem:
            raise ConfigError(problem)
        member_configs = list(member_configs or [config] * len(list(seeds)))
        problem = variants_problem(config, member_configs)
        if problem:
            raise ConfigError(problem)
        try:
            self.seeds = seeds = check_seeds(list(seeds))
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        self.config, self.args = config, config.learner
        args = self.args
        self.num_members = M = len(seeds)
        # the solo run's start (device, threads, one-line refusals of sizes the machine cannot
        # hold, precision) with the envs seeded per member block
        self.ctx = start_run(config, M * args.num_envs, env_seed=list(seeds))
        self.env = env = self.ctx.env
        self.device = self.ctx.device.torch
        if env.num_agents != 1:
            raise ConfigError("a population trains single-agent games for now")
        self.n = args.num_envs  # each member's envs
        self.rows = env.num_rows
        # each member's random stream, seeded as its solo run's (rank 0 of one process)
        self.generators = [
            torch.Generator(device=self.device).manual_seed(distributed.rank_seed(s, 0) % 2**63)
            for s in seeds
        ]
        members = build_members(config, seeds, self.device)
        self.template = members[0]  # a solo network, for a member's solo-format state
        self.population = Population(members)
        if len(member_configs) != M:
            raise ConfigError(f"{len(member_configs)} member configs for {M} seeds")
        self.member_args = [mc.learner for mc in member_configs]

        def each(name, dtype=torch.float32):  # a setting per member, (M,)
            values = [float(getattr(a, name)) for a in self.member_args]
            return torch.tensor(values, dtype=dtype, device=self.device)

        self.lrs = each("learning_rate", torch.float64).cpu()
        self.optimizer = PopulationAdam(self.population, self.lrs, eps=1e-5)
        clip = each("clip_coef", torch.float64)  # the ratio's bounds as a float's, in float64
        self.clip = clip.float()
        self.ratio_low, self.ratio_high = (1 - clip).float(), (1 + clip).float()
        self.vf_coef = each("vf_coef")
        self.max_grad_norm = each("max_grad_norm")
        self.ent_coefs = each("ent_coef")  # the schedule's start, per member
        self.amp_dtype = self.ctx.amp_dtype
        self.batch_size = args.num_envs * args.num_steps  # per member
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.batch_size)
        T, obs_bytes = args.num_steps, env.obs_dtype.itemsize * math.prod(env.obs_shape)
        check_memory((2 * T + 1) * self.rows * obs_bytes + T * self.rows * 36,
                     f"the population's rollout storage ({M} members)", self.device)  # fmt: skip
        backend = self.ctx.device.backend
        self.storage = new_rollout(env, args, self.rows, None, self.device, backend)
        self.storage.obs[0].copy_(env.obs)
        if len({(a.gamma, a.gae_lambda) for a in self.member_args}) > 1:
            self.storage.gae = self.member_gae(backend)
        self.ent_coef = self.ent_coefs.clone()  # annealed in place (ppo.anneal_ent)
        self.iteration, self.global_step = 0, 0
        self.timers = Timers()

    # ------------------------------------------------------------------------------ ROLLOUT

    def by_member(self, rows: torch.Tensor) -> torch.Tensor:
        """A ``(rows, ...)`` tensor as ``(M, n, ...)``: member ``k``'s block of rows."""
        return rows.view(self.num_members, self.n, *rows.shape[1:])

    def rollout(self) -> None:
        """``num_steps`` steps of every member's envs, each acting with its own policy and
        sampling noise from its own stream (as its solo run: ``ppo.Trainer.rollout_steps``)."""
        s, env = self.storage, self.env
        with torch.inference_mode():
            for t in range(self.args.num_steps):
                t0 = time.perf_counter()
                logits, value, _ = self.population(self.by_member(s.obs[t]))  # (M, n, A)
                noise = torch.stack(
                    [
                        torch.rand(logits.shape[1:], generator=g, device=self.device)
                        for g in self.generators
                    ]
                )
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

    def member_values(self, k: int, obs: torch.Tensor) -> torch.Tensor:
        """Member ``k``'s values of ``obs`` (B, *obs_shape)."""
        stacked = self.population.stacked
        tensors = {n: p[k] for n, p in stacked.named_parameters()}
        tensors.update({n: b[k] for n, b in stacked.named_buffers()})
        return functional_call(self.population._base[0], tensors, (obs,))[1]

    def member_gae(self, backend: str):
        """The advantage kernel with each member's ``gamma`` and ``gae_lambda`` on its columns
        (``kernels.gae.GAE_COLUMNS``), bound once as the solo's ``GAE``."""
        from fasttrain.kernels.gae import GAE_COLUMNS

        s = self.storage

        def per_column(name):
            values = [float(getattr(a, name)) for a in self.member_args]
            return torch.tensor(values, dtype=torch.float64).repeat_interleave(self.n)

        gammas, lambdas = per_column("gamma"), per_column("gae_lambda")
        self._gae_settings = (gammas, lambdas) = gammas.to(self.device), lambdas.to(self.device)
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
            s.last_values.copy_(self.population(self.by_member(s.obs[-1]))[1].reshape(-1))
            s.final_values.zero_()
            rows = s.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            for k in torch.unique(rows[1] // self.n).tolist() if rows[0].numel() else []:
                mine = tuple(r[rows[1] // self.n == k] for r in rows)
                s.final_values[mine] = self.member_values(k, s.final_obs[mine])
        stream = 0
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        s.gae(stream=stream)
        self.timers.forward += time.perf_counter() - t0

    # ------------------------------------------------------------------------------ UPDATE

    def minibatch_orders(self) -> torch.Tensor:
        """Each member's minibatch order over its own batch, drawn from its own stream as the
        solo run draws it, as flat indices into the whole ``(num_steps * rows)`` storage:
        ``(M, batch_size)``."""
        orders = torch.stack(
            [
                torch.randperm(self.batch_size, generator=g, device=self.device)
                for g in self.generators
            ]
        )
        # member k's flat index b = t * n + i is storage row t, column k * n + i
        members = torch.arange(self.num_members, device=self.device)[:, None]
        return orders // self.n * self.rows + members * self.n + orders % self.n

    def losses(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's PPO loss on its minibatch ``mb`` (M, B) of flat storage indices:
        ``(M,)`` losses and ``(M, 5)`` stats (``LOSS_NAMES``), each as ``ppo.Trainer.loss``."""
        s = self.storage
        obs = s.obs[:-1].reshape(-1, *self.env.obs_shape)[mb]  # (M, B, *obs_shape)
        batch = [getattr(s, name).reshape(-1)[mb] for name in
                 ("actions", "logprobs", "advantages", "returns", "values")]  # fmt: skip
        coefs = (self.clip, self.ratio_low, self.ratio_high, self.ent_coef, self.vf_coef)
        population = self.population
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

    def autocast(self):
        """The update's mixed precision, as the solo run's (``run.amp``)."""
        return torch.autocast(
            self.device.type, self.amp_dtype or torch.bfloat16, enabled=self.amp_dtype is not None
        )

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
        totals = torch.zeros(self.num_members, len(LOSS_NAMES), device=self.device)
        updates = 0
        for _epoch in range(args.update_epochs):
            order = self.minibatch_orders()
            for start in range(0, self.batch_size, self.minibatch_size):
                losses, stats = self.losses(order[:, start : start + self.minibatch_size])
                population_step(self.optimizer, losses, self.max_grad_norm)
                totals += stats
                updates += 1
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        return totals / updates

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

    def member_stats(self) -> list[dict]:
        """Each member's means over the episodes its envs finished since the last call (an
        empty dict for a member with none), then clear: ``VecEnv.stats`` per member."""
        arrays = self.env.arrays
        sums = {
            name: self.env.to_host(arrays[f"done_{name}"]).reshape(self.num_members, -1).sum(1)
            for name in ("return", "length", "score", "count")
        }
        out = []
        for k in range(self.num_members):
            count = int(sums["count"][k])
            if count == 0:
                out.append({})
                continue
            out.append(
                {
                    "return": float(sums["return"][k]) / count,
                    "length": float(sums["length"][k]) / count,
                    "score": float(sums["score"][k]) / count,
                    "episodes": count,
                }
            )
        self.env.stats()  # clears every env's sums
        return out

    # ------------------------------------------------------------------------------ STATE

    def state_dict(self) -> dict:
        """Everything needed to continue the whole population bit for bit (host copies)."""
        s = self.storage
        return {
            "learner": "ppo-population",
            "seeds": list(self.seeds),
            "global_step": self.global_step,
            "iteration": self.iteration,
            "weights": {
                n: t.detach().cpu().clone() for n, t in self.population.stacked.state_dict().items()
            },  # fmt: skip
            "optimizer": {
                k: [t.cpu() for t in v] if isinstance(v, list) else v.cpu()
                for k, v in self.optimizer.state_dict().items()
            },
            "env": self.env.state_dict(),
            "generators": [g.get_state() for g in self.generators],
            "next_obs": s.obs[0].cpu().clone(),
            "next_episode_starts": s.episode_starts[0].cpu().clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` output of a population of the same seeds and sizes;
        one line (``ConfigError``) where it does not fit, before anything changes."""
        if not isinstance(state, dict) or state.get("learner") != "ppo-population":
            raise ConfigError("not a PPO population's state")
        if state.get("seeds") != list(self.seeds):
            raise ConfigError(
                f"the state is of seeds {state.get('seeds')}, this population's are "
                f"{list(self.seeds)}: resume it with the same seeds"
            )
        own = self.population.stacked.state_dict()
        weights = state.get("weights")
        if not isinstance(weights, dict) or {n: tuple(t.shape) for n, t in weights.items()} != {
            n: tuple(t.shape) for n, t in own.items()
        }:
            raise ConfigError("the state's weights do not fit this population's network")
        generators = state.get("generators")
        if not isinstance(generators, list) or len(generators) != self.num_members:
            raise ConfigError("the state holds no random stream per member")
        try:
            self.env.load_state_dict(state["env"])
            self.optimizer.load_state_dict(
                {
                    k: [t.to(self.device) for t in v] if isinstance(v, list) else v.to(self.device)
                    for k, v in state["optimizer"].items()
                }  # fmt: skip
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"the state does not fit this population: {exc}") from None
        with torch.no_grad():
            for name, tensor in own.items():
                tensor.copy_(weights[name])
        for g, saved in zip(self.generators, generators, strict=True):
            g.set_state(saved)
        self.global_step, self.iteration = int(state["global_step"]), int(state["iteration"])
        self.storage.obs[0].copy_(state["next_obs"])
        self.storage.episode_starts[0].copy_(state["next_episode_starts"])

    # ------------------------------------------------------------------ MEMBERS AS SOLO RUNS

    @property
    def updates_per_iteration(self) -> int:
        return self.args.update_epochs * self.args.num_minibatches

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        """Member ``k``'s state in the solo PPO trainer's checkpoint form (``ppo.Trainer.
        state_dict``): its weights, its Adam state as ``torch.optim.Adam`` keeps it, its block
        of the env buffers, its random stream, where its next rollout starts. ``env_state``:
        ``env.state_dict()``, when the caller read it once for every member."""
        rows = slice(k * self.n, (k + 1) * self.n)
        env_state = self.env.state_dict() if env_state is None else env_state
        s = self.storage
        return {
            "learner": "ppo",
            "global_step": self.global_step,
            "iteration": self.iteration,
            "optimizer": self.solo_optimizer_state(k),
            "env": {name: array[rows].copy() for name, array in env_state.items()},
            "device": self.device.type,
            "generator": self.generators[k].get_state(),
            "torch_rng": torch.get_rng_state(),
            "model": self.population.member_state_dict(k),
            "next_obs": s.obs[0][rows].cpu().clone(),
            "next_episode_starts": s.episode_starts[0][rows].cpu().clone(),
        }

    def solo_optimizer_state(self, k: int) -> dict:
        """Member ``k``'s Adam state as the solo run's ``torch.optim.Adam.state_dict()``."""
        solo = adam(self.template.parameters(), float(self.optimizer.lrs[k]), eps=1e-5)
        state = solo.state_dict()
        steps = float(self.optimizer.steps[k])
        fused = bool(state["param_groups"][0].get("fused"))
        if steps > 0:
            for i, (m, v) in enumerate(
                zip(self.optimizer.exp_avg, self.optimizer.exp_avg_sq, strict=True)
            ):
                step = torch.tensor(steps, dtype=torch.float32)
                state["state"][i] = {
                    "step": step.to(m.device) if fused else step,
                    "exp_avg": m[k].detach().clone(),
                    "exp_avg_sq": v[k].detach().clone(),
                }
        return state

    def load_members(self, states: list[dict]) -> None:
        """Continue from each member's solo-format state (``member_state``), in member order:
        the population's state put together from them, then ``load_state_dict`` (which checks
        every shape before anything changes). Members at different iterations are refused."""
        if len(states) != self.num_members:
            raise ConfigError(f"{len(states)} member states for {self.num_members} members")
        steps = {(int(st["global_step"]), int(st["iteration"])) for st in states}
        if len(steps) != 1:
            raise ConfigError(
                "the members' checkpoints are at different steps (a run stopped while saving "
                "them); resume each member alone with --resume SEED_DIR"
            )
        ((global_step, iteration),) = steps
        try:
            weights = {
                name: torch.stack([torch.as_tensor(st["model"][name]) for st in states])
                for name in self.population.stacked.state_dict()
            }
            optimizer = self._population_optimizer(states)
            env = {
                name: np.concatenate([st["env"][name] for st in states])
                for name in self.env.state_dict()
            }
            next_obs = torch.cat([torch.as_tensor(st["next_obs"]) for st in states])
            starts = torch.cat([torch.as_tensor(st["next_episode_starts"]) for st in states])
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as exc:
            raise ConfigError(
                f"a member's checkpoint does not fit this population: {exc}"
            ) from None
        self.load_state_dict(
            {
                "learner": "ppo-population",
                "seeds": list(self.seeds),
                "global_step": global_step,
                "iteration": iteration,
                "weights": weights,
                "optimizer": optimizer,
                "env": env,
                "generators": [st["generator"] for st in states],
                "next_obs": next_obs,
                "next_episode_starts": starts,
            }
        )

    def _population_optimizer(self, states: list[dict]) -> dict:
        """The population Adam's state from each member's solo Adam state."""
        lrs, steps, exp_avg, exp_avg_sq = [], [], [], []
        shapes = [tuple(p.shape[1:]) for p in self.optimizer.params]
        for st in states:
            saved = st["optimizer"]
            lrs.append(float(saved["param_groups"][0]["lr"]))
            per_param = saved["state"]
            if per_param:
                steps.append(float(per_param[0]["step"]))
                exp_avg.append(
                    [torch.as_tensor(per_param[i]["exp_avg"]) for i in range(len(shapes))]
                )
                exp_avg_sq.append(
                    [torch.as_tensor(per_param[i]["exp_avg_sq"]) for i in range(len(shapes))]
                )
            else:  # no step taken yet
                steps.append(0.0)
                exp_avg.append([torch.zeros(shape) for shape in shapes])
                exp_avg_sq.append([torch.zeros(shape) for shape in shapes])
        return {
            "lrs": torch.tensor(lrs, dtype=torch.float32),
            "steps": torch.tensor(steps, dtype=torch.float64),
            "exp_avg": [torch.stack(list(ts)) for ts in zip(*exp_avg, strict=True)],
            "exp_avg_sq": [torch.stack(list(ts)) for ts in zip(*exp_avg_sq, strict=True)],
            "skipped": torch.zeros(self.num_members, dtype=torch.int64),
        }

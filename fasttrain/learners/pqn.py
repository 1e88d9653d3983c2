"""PQN: Q-learning over many environments without a replay buffer or a target network.

Gallici et al., "Simplifying Deep Temporal Difference Learning" (ICLR 2025; mttga/purejaxql,
CleanRL's pqn.py). Each iteration rolls out ``num_steps`` epsilon-greedy steps of every
environment into time-major storage, computes Q(lambda) returns backwards over it with one
learner-kernel launch (``kernels/qlambda.py``), takes ``update_epochs`` passes of minibatch
regression of Q(s, a) on those returns, and throws the rollout away. LayerNorm after each hidden
layer keeps the bootstrapping from its own, moving network stable. As in PPO, the environment
writes each step's observations straight into ``obs[t + 1]`` (and final observations of ended
episodes into ``final_obs[t]``), and a truncated step bootstraps from the greedy value of
``final_obs`` where a terminated one does not bootstrap at all.
"""

from __future__ import annotations

import time

import torch

from fasttrain.learners import rollout
from fasttrain.learners.actors import actor_of
from fasttrain.learners.base import TrainerBase, check_memory
from fasttrain.learners.compile import CompiledStep, call_module
from fasttrain.learners.context import warn_once
from fasttrain.learners.graphs import tensor_addresses, update_key

# CONFIG: the [pqn] dataclass and its checks are in pqn_config.py (torch-free)
from fasttrain.learners.pqn_config import AUTO_COMPILE, PQNConfig
from fasttrain.models import make_q_network

LOSS_NAMES = ("td_loss", "q_values")


def epsilon_at(pqn: PQNConfig, iteration: int, num_iterations: int) -> float:
    """Exploration epsilon of ``iteration``: linear from ``start_e`` to ``end_e`` over the first
    ``exploration_fraction`` of ``num_iterations``, then ``end_e`` (purejaxql's schedule, in
    iterations, so a rollout acts with one epsilon)."""
    duration = pqn.exploration_fraction * num_iterations
    if iteration >= duration:
        return pqn.end_e
    return pqn.start_e + (pqn.end_e - pqn.start_e) * iteration / duration


def new_network(config, obs_shape, obs_dtype, num_actions: int, obs_categories=0, device="cpu"):
    """PQN's network for observations of ``obs_shape`` and ``obs_dtype``: a Q-network with a
    LayerNorm after each hidden layer where ``pqn.layer_norm``."""
    layer_norm = config.learner.layer_norm
    return make_q_network(
        obs_shape,
        obs_dtype,
        num_actions,
        config.model,
        device,
        obs_categories=obs_categories,
        layer_norm=layer_norm,
    )


actor = actor_of(new_network, policy=False)  # play and eval: the argmax of the Q-values


# ------------------------------------------------------------------------------- SETUP


class Trainer(TrainerBase):
    """Holds the environment, Q-network, optimizer and rollout storage of one PQN run (or of a
    population's members: ``learners/population.py``)."""

    def __init__(self, config, warn=print, members=None):
        super().__init__(config, members)
        self.q_network, self.optimizer = self.build(self.make_network, eps=1e-5)
        args, env = self.args, self.env
        self.batch_size = self.n * args.num_steps  # each member's, per rank
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.steps_per_iteration)
        M = self.num_members
        name = "PQN rollout storage" + (f" ({M} members)" if M > 1 else "")
        check_memory(rollout.nbytes(env, args.num_steps, False, None), name, self.device)
        settings = [self.per_column(lambda a: a.gamma), self.per_column(lambda a: a.q_lambda)]
        backend = self.ctx.device.backend
        self.storage = rollout.new_rollout(
            env, args.num_steps, self.device, backend, settings, policy=False
        )
        self.storage.obs[0].copy_(env.obs)
        # a rollout's exploration draws, made before it: explore[t] (uniform draws below
        # epsilon) and random_actions[t] of step t; greedy[t] is the argmax
        T, N, dev = args.num_steps, self.rows, self.device
        self.explore = torch.zeros((T, N), dtype=torch.bool, device=dev)
        self.uniform = torch.zeros((T, N), device=dev)
        self.random_actions = torch.zeros((T, N), dtype=torch.int64, device=dev)
        self.greedy = torch.zeros((T, N), dtype=torch.int64, device=dev)
        # flat views of the rollout, b_ prefixes as in CleanRL (no copies)
        s = self.storage
        self.b_obs = s.obs[:-1].view(T * N, *env.obs_shape)
        self.b_actions, self.b_returns = s.actions.view(-1), s.returns.view(-1)
        self.max_grad_norm = self.per_member(lambda a: a.max_grad_norm)
        warn = warn_once(warn)  # one compile warning covers the rollout and the update
        self.compile_mode = self.compile_mode_for(AUTO_COMPILE)
        self.act_network = CompiledStep(
            call_module, self.q_network, self.compile_mode, warn, "the network"
        )
        self.train_step = CompiledStep(Trainer.minibatch_step, self, self.compile_mode, warn)
        # on cuda the rollout's steps as one CUDA graph (they draw nothing: the exploration is
        # drawn before them) and each minibatch step as another, its order drawn on the device
        self.setup_graphs(warn)

    @property
    def network(self):
        return self.q_network

    acting = network
    builder = staticmethod(new_network)  # the network it trains and acts with

    # --------------------------------------------------------------------------- ROLLOUT

    def epsilons(self):
        """Each member's epsilon for the current iteration's rollout (``epsilon_at``)."""
        return self.per_member(lambda a: epsilon_at(a, self.iteration, self.num_iterations))

    @property
    def epsilon(self) -> float:
        """Epsilon of the current iteration's rollout (the first member's)."""
        return epsilon_at(self.member_args[0], self.iteration, self.num_iterations)

    def rollout(self) -> None:
        """Every step's exploration drawn first, each member's from its own stream (its
        uniforms, then its random actions), then the steps."""
        env, args, timers = self.env, self.args, self.timers
        with torch.inference_mode():
            t0 = time.perf_counter()
            draws = zip(
                self.blocks(self.uniform, 1), self.blocks(self.random_actions, 1), strict=True
            )
            for (uniform, actions), g in zip(draws, self.generators, strict=True):
                uniform.copy_(torch.rand(uniform.shape, generator=g, device=self.device))
                random = torch.randint(
                    0, env.num_actions, actions.shape, generator=g, device=self.device
                )
                actions.copy_(random)
            epsilon = self.epsilons()
            if isinstance(epsilon, torch.Tensor):  # each member's on its columns
                epsilon = epsilon.repeat_interleave(self.n)
            torch.lt(self.uniform, epsilon, out=self.explore)
            timers.forward += time.perf_counter() - t0
        self.run_steps(None)
        self.global_step += args.num_steps * self.n * self.world  # agent steps, all ranks

    def rollout_steps(self, _slot=None) -> None:
        """The rollout's steps, launched one by one (what a CUDA graph captures): act on the
        exploration drawn before them, step, store."""
        env, s, timers = self.env, self.storage, self.timers
        with torch.inference_mode():
            for t in range(self.args.num_steps):
                t0 = time.perf_counter()
                # float32: the rollout's forward pass stays out of autocast, as in PPO
                q = self.act(self.act_network, s.obs[t])
                torch.max(q, dim=1, out=(s.values[t], self.greedy[t]))
                torch.where(
                    self.explore[t], self.random_actions[t], self.greedy[t], out=s.actions[t]
                )
                t1 = time.perf_counter()
                # actions are in range by construction: skip the check that costs a host sync
                env.step(s.actions[t], out=s.step_outputs[t], check=False)
                t2 = time.perf_counter()
                timers.forward += t1 - t0
                timers.env += t2 - t1

    def graph_key(self, _slot=None) -> tuple:
        """What a captured horizon baked in: the env's launch values, the network's tensors."""
        return (self.env.params_version, tensor_addresses(self.q_network))

    # --------------------------------------------------------------------------- RETURNS

    def compute_returns(self) -> None:
        """Q(lambda) returns of the rollout, from the acting network's values (each member's
        on its columns)."""
        s = self.storage
        t0 = time.perf_counter()
        with torch.inference_mode():
            s.last_values.copy_(self.act(self.act_network, s.obs[-1]).max(dim=1).values)
            s.final_values.zero_()
            rows = s.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            for k, mine in self.member_groups(rows):
                s.final_values[mine] = self.member_net(k)(s.final_obs[mine]).max(dim=1).values
        s.compute_returns(self.device)
        self.timers.forward += time.perf_counter() - t0

    # --------------------------------------------------------------------------- UPDATE

    def minibatch_step(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step regressing Q(s, a) of minibatch ``mb`` (flat indices; a
        population's with the member axis first) on its returns (loss, backward, clipping, the
        step; skipped when not finite); returns ``[td_loss, mean q]``. ``run.compile``
        compiles it whole."""
        with self.ctx.autocast():
            q_all = self.q_network(self.b_obs[mb])
        q = q_all.float().gather(-1, self.b_actions[mb][..., None])[..., 0]
        loss = 0.5 * ((q - self.b_returns[mb]) ** 2).mean(-1)
        self.ctx.optimizer_step(
            self.optimizer, loss, self.q_network.parameters(), self.max_grad_norm
        )
        return torch.stack([loss.detach(), q.detach().mean(-1)], dim=-1)

    def update_key(self, _mb_slot=None) -> tuple:
        """What a captured minibatch step baked in (``graphs.update_key``)."""
        return update_key(self.q_network, self.optimizer, self.b_obs)

    def minibatches(self):
        """Each member's minibatches of its own batch, in the order its stream draws."""
        dev, n = self.device, self.n
        orders = torch.stack(
            [torch.randperm(self.batch_size, generator=g, device=dev) for g in self.generators]
        )
        members = torch.arange(self.num_members, device=dev)[:, None] * n
        order = self.member_axis(orders // n * self.rows + members + orders % n)
        for start in range(0, self.batch_size, self.minibatch_size):
            yield order[..., start : start + self.minibatch_size]

    def update(self) -> list[dict]:
        args = self.args
        t0 = time.perf_counter()
        if args.anneal_lr:
            self.set_learning_rates(self.scheduled_learning_rate)
        totals = torch.zeros((*self.member_shape, 2), device=self.device)  # LOSS_NAMES
        for _epoch in range(args.update_epochs):
            for mb in self.minibatches():
                totals += self.learn_minibatch(mb)
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        updates = args.update_epochs * args.num_minibatches
        return self.member_losses(LOSS_NAMES, totals, updates)

    def iterate(self) -> list[dict]:
        """One rollout, return pass and update; returns each member's losses and epsilon."""
        it, n = self.iteration, self.num_iterations  # the rollout's epsilons, logged with it
        epsilons = [epsilon_at(a, it, n) for a in self.member_args]
        self.rollout()
        self.compute_returns()
        losses = self.update()
        s = self.storage
        s.obs[0].copy_(s.obs[-1])  # the next rollout starts where this one ended
        return [{**row, "charts/epsilon": e} for row, e in zip(losses, epsilons, strict=True)]

    # --------------------------------------------------------------------------- STATE

    def carried(self) -> dict[str, torch.Tensor]:
        """Where the next rollout starts: its observations (the rollout is thrown away)."""
        return {"next_obs": self.storage.obs[0]}

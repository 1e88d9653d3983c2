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

import math
import time

import torch

from fasttrain import savedstate
from fasttrain.compile import CompiledStep, call_module
from fasttrain.errors import ConfigError
from fasttrain.kernels.qlambda import QLAMBDA
from fasttrain.learners.actors import greedy_q_actor
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
    set_learning_rate,
)

# CONFIG: the [pqn] dataclass and its checks are in pqn_config.py (torch-free)
from fasttrain.learners.pqn_config import AUTO_COMPILE, PQNConfig
from fasttrain.models import make_q_network


def epsilon_at(pqn: PQNConfig, iteration: int, num_iterations: int) -> float:
    """Exploration epsilon of ``iteration``: linear from ``start_e`` to ``end_e`` over the first
    ``exploration_fraction`` of ``num_iterations``, then ``end_e`` (purejaxql's schedule, in
    iterations, so a rollout acts with one epsilon)."""
    duration = pqn.exploration_fraction * num_iterations
    if iteration >= duration:
        return pqn.end_e
    return pqn.start_e + (pqn.end_e - pqn.start_e) * iteration / duration


# ------------------------------------------------------------------------------- SETUP


class Trainer(TrainerBase):
    """Holds the environment, Q-network, optimizer and rollout storage of one PQN run."""

    def __init__(self, config, warn=print):
        self.args = args = config.learner
        super().__init__(config, args.num_envs)
        env = self.env
        with user_sizes(f"the model (model.hidden = {config.model.hidden})"), one_torch_thread():
            self.q_network = make_q_network(
                env.obs_shape,
                env.obs_dtype,
                env.num_actions,
                config.model,
                self.device,
                obs_categories=env.spec.obs_categories,
                layer_norm=args.layer_norm,
            )
        self.share_weights(self.q_network)
        self.fit_threads(self.q_network)
        self.optimizer = make_optimizer(args.optimizer, self.q_network, args.learning_rate, 1e-5)
        self.batch_size = self.rows * args.num_steps  # per rank
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.steps_per_iteration)
        self.allocate_storage()
        warn = warn_once(warn)  # one compile warning covers the rollout and the update
        self.compile_mode = self.compile_mode_for(AUTO_COMPILE)
        self.act_network = CompiledStep(
            call_module, self.q_network, self.compile_mode, warn, "the network"
        )
        self.train_step = CompiledStep(Trainer._train_step, self, self.compile_mode, warn)
        self.qlambda = self.bind_returns()
        # on cuda the rollout's steps as one CUDA graph; they draw nothing (the exploration
        # is drawn before them)
        self.horizon_graph = rollout_graph(
            config, self.device, self.rollout_steps, self.graph_key, [], self.env, warn,
            self.compile_mode,
        )  # fmt: skip
        # each minibatch step as a CUDA graph where the rollout is one (its order drawn on the
        # device before it); sets rates_on_device
        self.update_graph = setup_update_graph(
            self, config, self._train_step, self.update_key, warn
        )

    def allocate_storage(self) -> None:
        """Time-major storage, allocated once; obs[t + 1] and final_obs[t] are written by the
        env. Refused in one line, before allocating, where it cannot fit."""
        T, N, dev, env = self.args.num_steps, self.rows, self.device, self.env
        obs_bytes = env.obs_dtype.itemsize * math.prod(env.obs_shape)
        check_memory((2 * T + 1) * N * obs_bytes + T * N * 48, "PQN rollout storage", dev)
        self.obs = torch.zeros((T + 1, N, *env.obs_shape), dtype=env.obs_dtype, device=dev)
        self.final_obs = torch.zeros((T, N, *env.obs_shape), dtype=env.obs_dtype, device=dev)
        self.actions = torch.zeros((T, N), dtype=torch.int64, device=dev)
        self.rewards = torch.zeros((T, N), device=dev)
        self.values = torch.zeros((T, N), device=dev)  # max_a Q(obs[t], a) while acting
        self.final_values = torch.zeros((T, N), device=dev)  # max_a Q(final_obs[t]) if truncated
        self.last_values = torch.zeros(N, device=dev)  # max_a Q(obs[T], a)
        self.returns = torch.zeros((T, N), device=dev)  # Q(lambda) targets
        self.terminated = torch.zeros((T, N), dtype=torch.bool, device=dev)
        self.truncated = torch.zeros((T, N), dtype=torch.bool, device=dev)
        # a rollout's exploration draws, made in one call before it: explore[t] (uniform draws
        # below epsilon) and random_actions[t] of step t; greedy[t] is the argmax
        self.explore = torch.zeros((T, N), dtype=torch.bool, device=dev)
        self.uniform = torch.zeros((T, N), device=dev)
        self.random_actions = torch.zeros((T, N), dtype=torch.int64, device=dev)
        self.greedy = torch.zeros((T, N), dtype=torch.int64, device=dev)
        self.obs[0].copy_(env.obs)
        # the env writes obs[t + 1] and final_obs[t] at step t: bind each pair once
        self.step_outputs = [env.bind_outputs(self.obs[t + 1], self.final_obs[t]) for t in range(T)]
        # flat views of the rollout, b_ prefixes as in CleanRL (no copies)
        self.b_obs = self.obs[:-1].view(self.batch_size, *env.obs_shape)
        self.b_actions = self.actions.view(-1)
        self.b_returns = self.returns.view(-1)

    def bind_returns(self):
        """The Q(lambda) return kernel bound to the storage; its arguments are converted once,
        CPU tensors as NumPy views."""
        kernel_args = (
            self.rewards,
            self.values,
            self.last_values,
            self.final_values,
            self.terminated,
            self.truncated,
            self.args.gamma,
            self.args.q_lambda,
            self.returns,
        )
        if self.ctx.device.backend == "cpu":
            kernel_args = tuple(
                a.numpy() if isinstance(a, torch.Tensor) else a for a in kernel_args
            )
        return QLAMBDA.bind(self.ctx.device.backend, kernel_args)

    # --------------------------------------------------------------------------- ROLLOUT

    @property
    def epsilon(self) -> float:
        """Epsilon of the current iteration's rollout."""
        return epsilon_at(self.args, self.iteration, self.num_iterations)

    def rollout(self) -> None:
        env, args, timers = self.env, self.args, self.timers
        with torch.inference_mode():
            t0 = time.perf_counter()
            # every step's exploration in three calls: who explores, and with which action
            torch.rand(
                self.uniform.shape, generator=self.generator, device=self.device, out=self.uniform
            )
            torch.lt(self.uniform, self.epsilon, out=self.explore)
            torch.randint(
                0,
                env.num_actions,
                self.random_actions.shape,
                generator=self.generator,
                device=self.device,
                out=self.random_actions,
            )
            timers.forward += time.perf_counter() - t0
        run_rollout(self.horizon_graph, self.rollout_steps, None, timers)
        self.global_step += args.num_steps * self.rows * self.world  # agent steps, all ranks

    def rollout_steps(self, _slot=None) -> None:
        """The rollout's steps, launched one by one (what a CUDA graph captures): act on the
        exploration drawn before them, step, store."""
        env, args, timers = self.env, self.args, self.timers
        with torch.inference_mode():
            for t in range(args.num_steps):
                t0 = time.perf_counter()
                # float32: the rollout's forward pass stays out of autocast, as in PPO
                q = self.act_network(self.obs[t])
                torch.max(q, dim=1, out=(self.values[t], self.greedy[t]))
                torch.where(
                    self.explore[t], self.random_actions[t], self.greedy[t], out=self.actions[t]
                )
                t1 = time.perf_counter()
                # actions are in range by construction: skip the check that costs a host sync
                env.step(self.actions[t], out=self.step_outputs[t], check=False)
                self.rewards[t] = env.rewards
                self.terminated[t] = env.terminated
                self.truncated[t] = env.truncated
                t2 = time.perf_counter()
                timers.forward += t1 - t0
                timers.env += t2 - t1

    def graph_key(self, _slot=None) -> tuple:
        """What a captured horizon baked in: the env's launch values, the network's tensors."""
        return (self.env.params_version, tensor_addresses(self.q_network))

    # --------------------------------------------------------------------------- RETURNS

    def compute_returns(self) -> None:
        """Q(lambda) returns of the rollout (``returns``), from the acting network's values."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            self.last_values.copy_(self.act_network(self.obs[-1]).max(dim=1).values)
            self.final_values.zero_()
            rows = self.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            if rows[0].numel():
                self.final_values[rows] = self.q_network(self.final_obs[rows]).max(dim=1).values
        stream = 0
        if self.device.type == "cuda":  # launch on torch's stream, ordered with the learner
            stream = torch.cuda.current_stream(self.device).cuda_stream
        self.qlambda(stream=stream)
        self.timers.forward += time.perf_counter() - t0

    # --------------------------------------------------------------------------- UPDATE

    def _train_step(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step regressing Q(s, a) of minibatch ``mb`` (flat indices) on its
        returns (loss, backward, clipping, the step; skipped when not finite); returns
        ``[td_loss, mean q]``. ``run.compile`` compiles it whole."""
        with self.ctx.autocast():
            q_all = self.q_network(self.b_obs[mb])
        q = q_all.float().gather(1, self.b_actions[mb][:, None])[:, 0]
        loss = 0.5 * ((q - self.b_returns[mb]) ** 2).mean()
        self.ctx.optimizer_step(
            self.optimizer, loss, self.q_network.parameters(), self.args.max_grad_norm
        )
        return torch.stack([loss.detach(), q.detach().mean()])

    def update_key(self, _mb_slot=None) -> tuple:
        """What a captured minibatch step baked in (``graphs.update_key``)."""
        return update_key(self.q_network, self.optimizer, self.b_obs)

    def learn_minibatch(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step on minibatch ``mb``: a CUDA graph replay where there is one."""
        if self.update_graph is None:
            return self.train_step(mb)
        return self.update_graph(mb)

    def update(self) -> dict:
        args = self.args
        t0 = time.perf_counter()
        epsilon = self.epsilon  # the rollout's, logged with it
        if args.anneal_lr:
            frac = 1.0 - self.iteration / self.num_iterations
            set_learning_rate(self.optimizer, frac * args.learning_rate)
        totals = torch.zeros(2, device=self.device)  # td_loss, q_values
        for _epoch in range(args.update_epochs):
            order = torch.randperm(self.batch_size, generator=self.generator, device=self.device)
            for mb in order.view(args.num_minibatches, self.minibatch_size):
                totals += self.learn_minibatch(mb)
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        updates = args.update_epochs * args.num_minibatches
        skipped = self.ctx.take_skipped().to(totals.dtype)
        td_loss, q_values, skipped = torch.cat([totals / updates, skipped.view(1)]).tolist()
        return {
            "losses/td_loss": td_loss,
            "losses/q_values": q_values,
            "losses/skipped_updates": skipped,
            "charts/epsilon": epsilon,
        }

    def iterate(self) -> dict:
        """One rollout, return pass and update; returns the update's losses and epsilon."""
        self.rollout()
        self.compute_returns()
        losses = self.update()
        self.obs[0].copy_(self.obs[-1])  # the next rollout starts where this one ended
        return losses

    # --------------------------------------------------------------------------- STATE

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit (the rollout is thrown away each
        iteration; only the observation it ended on carries over)."""
        return {
            **self.base_state(),
            "model": self.q_network.state_dict(),
            "next_obs": self.obs[0].cpu().clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.check_state(state)  # nothing changes on a mismatch
        if "next_obs" not in state:
            raise ConfigError("checkpoint holds no PQN rollout state (next_obs)")
        model = savedstate.field(state, "model", "network weights")
        savedstate.weights(model, "model", self.q_network)
        savedstate.like(state["next_obs"], "next_obs", self.obs[0], self.env.spec.obs_categories)
        self.load_base_state(state)
        if self.rates_on_device:  # the loaded rates as the fused Adam reads them on cuda
            graph_safe_optimizer(self.optimizer, self.device)
        self.q_network.load_state_dict(state["model"])
        self.obs[0].copy_(state["next_obs"])


def actor(
    config,
    obs_shape,
    obs_dtype,
    num_actions: int,
    model_state: dict,
    obs_categories: int = 0,
    greedy: bool = True,
    seed: int = 0,
):
    """A greedy ``obs -> actions`` callable from trained Q-network weights (play and eval);
    a Q-network has no policy to sample, so ``greedy`` and ``seed`` change nothing."""
    q_network = make_q_network(
        obs_shape,
        obs_dtype,
        num_actions,
        config.model,
        obs_categories=obs_categories,
        layer_norm=config.learner.layer_norm,
    )
    return greedy_q_actor(q_network, model_state)


# ------------------------------------------------------------------------------- BENCHMARK


def ceiling(trainer: Trainer, updates: int = 3) -> float:
    """Samples/s of the update alone: every epoch and minibatch of the regression (forward,
    backward, optimizer step) on the trainer's rollout storage, without the rollout."""
    if trainer.global_step == 0:  # storage to learn from
        trainer.iterate()
    trainer.update()  # warm-up
    iteration = trainer.iteration
    start = time.perf_counter()
    for _ in range(updates):
        trainer.update()
    seconds_per_update = (time.perf_counter() - start) / updates
    trainer.iteration = iteration  # the schedules did not move
    return trainer.batch_size / seconds_per_update

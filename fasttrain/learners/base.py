"""The trainer protocol: what every learner's trainer implements, and the plumbing it inherits.

A learner supplies its steps; ``TrainerBase`` owns the rest:

- the learner writes ``iterate() -> list[dict]`` (one rollout, returns and update; each
  member's losses as ``losses/...`` keys), and where its rollout and update can run as CUDA
  graphs, ``rollout_steps(slot)`` (the T steps launched one by one), ``graph_key(slot)``,
  ``minibatch_step(mb) -> stats`` (one optimizer step, what ``run.compile`` compiles) and
  ``update_key(mb)``; ``carried()`` names the tensors where the next rollout starts;
- the base holds the counters, the run context, the members (a solo run is one; a population
  of M is a width of the same trainer: ``learners/population.py`` overrides the width hooks
  below and nothing else), the graph wiring (``setup_graphs``), the learning-rate schedule,
  and a member's checkpoint (``member_state``) read back through one reader
  (``load_members``: every member's state checked as a solo run's before anything changes).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fasttrain.device import check_memory, resolve_compile
from fasttrain.errors import ConfigError
from fasttrain.kernels.statecheck import StateError
from fasttrain.learners import distributed, savedstate
from fasttrain.learners.compile import (
    COLD_COMPILE_MIN_SECONDS,
    arithmetic_seconds,
    compile_key,
    compiled_before,
)
from fasttrain.learners.context import (
    Timers,
    one_torch_thread,
    setup_threads,
    start_run,
    user_sizes,
)
from fasttrain.learners.graphs import (
    graph_safe_optimizer,
    rollout_graph,
    run_rollout,
    setup_update_graph,
)
from fasttrain.learners.optim import Optimizers, make_optimizer, set_learning_rate

__all__ = ["TrainerBase", "annealed", "check_memory", "one_torch_thread"]


def annealed(value, iteration: int, num_iterations: int):
    """``value`` scaled by the share of iterations left: the one linear schedule (learning
    rates, PPO's entropy coefficient)."""
    return (1.0 - iteration / num_iterations) * value


class TrainerBase:
    """What the runner needs of every learner's trainer (see the module docstring).

    A subclass sets ``optimizer``, ``num_iterations`` and ``batch_size`` (each member's, per
    rank) and the network it trains and the one it acts with (``network``, ``acting``)."""

    iteration = 0
    global_step = 0
    horizon_graph = None  # the rollout as a CUDA graph (setup_graphs), or None: eager
    update_graph = None  # each minibatch step as a CUDA graph, or None
    rates_on_device = False  # the fused Adam reads its rate from a device tensor (cuda)
    compile_mode = "off"
    member_dims = 0  # leading member axes of a minibatch's indices: none for one member
    member_shape: tuple = ()  # the shape of a per-member value (a loss, a skip count)
    optional_carried: tuple = ()  # carried keys an older checkpoint may lack

    def __init__(self, config, members=None):
        self.config, self.args = config, config.learner
        # the members' configs: a solo run is the one member of its own config
        self.member_configs = list(members) if members is not None else [config]
        self.member_args = [c.learner for c in self.member_configs]
        self.num_members = M = len(self.member_configs)
        self.ctx = start_run(config, M * self.args.num_envs, self.env_seeds())
        self.env = self.ctx.env
        # learner rows: one per agent (num_envs * num_agents); member k has rows k*n..(k+1)*n
        self.rows = self.env.num_rows
        self.n = self.rows // M
        self.device = self.ctx.device.torch
        self.ctx.skipped = torch.zeros(self.member_shape, dtype=torch.int64, device=self.device)
        self.generators = self.member_generators()  # each member's sampling stream
        self.generator = self.generators[0]
        self.timers = Timers()
        self.world = self.ctx.ranks.world  # data-parallel ranks: steps count every rank's

    # ------------------------------------------------------------------ WIDTH: one member

    def env_seeds(self):
        """The environments' seeds: None for the run's own (a population: each member's, one
        per block of envs)."""
        return None

    def member_generators(self) -> list[torch.Generator]:
        """Each member's sampling stream: a solo run's is its context's."""
        return [self.ctx.generator]

    def make_network(self):
        """A network of this run's shapes on its device, built by the learner's ``builder``
        (its ``new_network(config, obs_shape, obs_dtype, num_actions, obs_categories,
        device)``, which its play and eval actor builds with too)."""
        env = self.env
        shapes = (env.obs_shape, env.obs_dtype, env.num_actions, env.spec.obs_categories)
        return self.builder(self.config, *shapes, self.device)

    def build(self, make, eps: float):
        """The trained network (``make()``, on one thread, as a solo run seeds it) and its
        optimizer (``{algo}.optimizer``, learning rate ``learning_rate``, ``eps``)."""
        with user_sizes(f"the model (model.hidden = {self.config.model.hidden})"):
            with one_torch_thread():
                network = make()
        self.share_weights(network)
        self.fit_threads(network)
        args = self.args
        return network, make_optimizer(args.optimizer, network, args.learning_rate, eps)

    def act(self, forward, *inputs):
        """``forward(*inputs)`` over every row: the acting network's outputs, per row."""
        return forward(*inputs)

    def member_net(self, k: int):
        """Member ``k``'s acting network, called as a solo run's (``value``, a forward)."""
        return self.acting

    def member_groups(self, rows: tuple) -> list:
        """``rows`` (as ``nonzero(as_tuple=True)`` of a ``(T, N)`` tensor) by member:
        ``[(k, member k's rows)]``, members without one left out."""
        return [(0, rows)] if rows[0].numel() else []

    def blocks(self, tensor: torch.Tensor, axis: int = 0) -> list[torch.Tensor]:
        """Each member's block of ``tensor`` along its rows' ``axis``."""
        return [tensor]

    def member_axis(self, tensor: torch.Tensor) -> torch.Tensor:
        """A ``(M, ...)`` tensor as this run indexes it: one member drops the axis."""
        return tensor[0]

    def per_member(self, fn, dtype=torch.float32):
        """``fn(section)`` of each member's learner section: one number for one member."""
        return fn(self.args)

    def per_sample(self, fn):
        """``per_member`` shaped against a minibatch's samples on the last axis."""
        return self.per_member(fn)

    def per_column(self, fn) -> torch.Tensor:
        """``fn(section)`` of each row's member, float64 ``(rows,)`` on the CPU (the returns
        kernels' discount and trace decay)."""
        return torch.full((self.rows,), float(fn(self.args)), dtype=torch.float64)

    def set_learning_rates(self, fn) -> None:
        """Each member's learning rate to ``fn(section)`` (a schedule's step)."""
        set_learning_rate(self.optimizer, fn(self.args))

    def learning_rates(self) -> list[float]:
        return [float(self.optimizer.param_groups[0]["lr"])]

    def member_weights(self, k: int) -> dict:
        return self.network.state_dict()

    def member_optimizer_state(self, k: int) -> dict:
        return self.optimizer.state_dict()

    def member_env_state(self, k: int, env_state: dict) -> dict:
        return env_state

    def member_stats(self) -> list[dict]:
        """Each member's episode means since the last call (``VecEnv.stats``), then clear."""
        return [self.env.stats()]

    def references(self) -> tuple:
        """The network and optimizer a member's saved state is checked against."""
        return self.network, self.optimizer

    def load_member(self, k: int, state: dict) -> None:
        """Member ``k``'s checked state into its network, optimizer and stream."""
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                "checkpoint's optimizer state does not fit this run's optimizer; resume with "
                "the optimizer it was written with"
            ) from None
        if not isinstance(self.optimizer, Optimizers):  # eager steps take a float rate, as
            for group in self.optimizer.param_groups:  # before a compiled step saved a tensor
                group["lr"] = float(group["lr"])
        self.network.load_state_dict(state["model"])
        self.generators[k].set_state(state["generator"])

    def load_env(self, states: list[dict]) -> None:
        self.load_env_arrays(states[0]["env"])

    # ------------------------------------------------------------------ SIZES AND LOG

    def share_weights(self, *modules) -> None:
        """Rank 0's weights on every rank (data-parallel runs; nothing otherwise)."""
        if self.ctx.ranks.enabled:
            for module in modules:
                distributed.broadcast_module(module)

    @property
    def learning_rate(self) -> float:
        return self.learning_rates()[0]

    @property
    def steps_per_iteration(self) -> int:
        """Agent steps of each member per iteration, over every rank."""
        return self.n * self.args.num_steps * self.world

    def fit_threads(self, network: torch.nn.Module) -> None:
        """Thread counts for this run's size (``setup_threads``): a small network stepping few
        rows runs on one torch and one Numba thread where the config leaves them at 0."""
        weights = sum(p.numel() for p in network.parameters() if p.ndim > 1)
        setup_threads(self.config.run, self.ctx.ranks.local_world, self.env.num_rows * weights)

    def describe_rows(self) -> str:
        """``256 envs`` or, with several agents per environment, ``64 envs x 8 agents``."""
        envs = f"{self.env.num_envs // self.num_members} envs"
        return envs if self.env.num_agents == 1 else f"{envs} x {self.env.num_agents} agents"

    def describe(self) -> str:
        """The shape of one iteration, for the run's first log line."""
        text = f"{self.describe_rows()} x {self.args.num_steps} steps = batch {self.batch_size}"
        text = text if self.world == 1 else f"{text} per rank x {self.world} ranks"
        return text + self.compile_note()

    # why run.compile = "auto" left a run eager that it would have compiled with a warm cache
    compile_skipped = ""

    def compile_mode_for(self, auto_compile: bool, recurrent: bool = False) -> str:
        """``run.compile`` resolved for this run (``fasttrain.device.resolve_compile``), with
        what the learner says of compiling it (its ``Learner.auto_compile``); ``auto`` runs
        eagerly where torch's cache holds none of this run's steps and its arithmetic is too
        short for a cold compile to pay (``COLD_COMPILE_MIN_SECONDS``; ``compile_skipped`` says
        so on the first line)."""
        steps = self.args.total_timesteps
        mode = resolve_compile(
            self.config.run.compile,
            self.ctx.device,
            steps,
            auto_compile,
            recurrent,
            self.config.model.hidden,
        )
        self.compile_key = compile_key(self.config, self.precision)
        if self.config.run.compile != "auto" or mode == "off":
            return mode
        weights = sum(p.numel() for p in self.network.parameters())
        epochs = getattr(self.args, "update_epochs", 1)
        short = arithmetic_seconds(weights, steps, epochs) < COLD_COMPILE_MIN_SECONDS
        if short and not compiled_before(self.compile_key):
            self.compile_skipped = (
                f"eager: a first compile (none cached) does not pay in {steps:,} steps of this "
                "network"
            )
            return "off"
        return mode

    @property
    def precision(self) -> str:
        """The update's arithmetic: ``bf16`` or ``fp16`` under ``run.amp``, else ``fp32``."""
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.ctx.amp_dtype, "fp32")

    def compile_note(self) -> str:
        """`` | bf16 update`` (or fp16) under mixed precision (``run.amp``; the rollout's forward
        passes stay float32), then `` | torch.compile (MODE)`` when the learner compiles."""
        note = "" if self.precision == "fp32" else f" | {self.precision} update"
        mode = self.compile_mode
        if mode == "off":
            return note + (f" | {self.compile_skipped}" if self.compile_skipped else "")
        return note + f" | torch.compile ({mode})"

    def member_losses(self, names, totals: torch.Tensor, updates: int) -> list[dict]:
        """Each member's mean stats over ``updates`` minibatch steps (``totals``, by ``names``)
        and the updates it skipped: ``losses/...`` rows, read in the one host sync."""
        M = self.num_members
        skipped = self.ctx.take_skipped().to(totals.dtype).reshape(M, 1)
        means = torch.cat([(totals / max(updates, 1)).reshape(M, -1), skipped], 1).tolist()
        names = (*names, "skipped_updates")
        return [{f"losses/{k}": v for k, v in zip(names, row, strict=True)} for row in means]

    # ------------------------------------------------------------------ GRAPHS

    def setup_graphs(self, warn, streams=()) -> None:
        """On cuda (``run.cuda_graph``), the rollout's steps as one CUDA graph (``streams``:
        the generators they draw from) and each minibatch step as another
        (``learners/graphs.py``); where they cannot be captured, one line says why and they
        run eagerly."""
        self.horizon_graph = rollout_graph(
            self.config,
            self.device,
            self.rollout_steps,
            self.graph_key,
            streams,
            self.env,
            warn,
            self.compile_mode,
        )
        self.update_graph = setup_update_graph(self, self.minibatch_step, self.update_key, warn)

    def run_steps(self, slot) -> None:
        """``rollout_steps(slot)``, launched one by one or replayed as a graph."""
        run_rollout(self.horizon_graph, self.rollout_steps, slot, self.timers)

    def learn_minibatch(self, mb: torch.Tensor) -> torch.Tensor:
        """One optimizer step on minibatch ``mb``; returns the loss stats: a CUDA graph replay
        where ``setup_graphs`` made one."""
        if self.update_graph is None:
            return self.train_step(mb)
        return self.update_graph(mb)

    # ------------------------------------------------------------------ STATE

    def carried(self) -> dict[str, torch.Tensor]:
        """The tensors, by checkpoint key, where the next iteration starts: ``(rows, ...)``,
        each member's block of rows its own."""
        return {}

    def member_rows(self, k: int) -> slice:
        return slice(k * self.n, (k + 1) * self.n)

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        """Member ``k``'s checkpoint state (a solo run's form: ``eval``, ``play`` and a solo
        ``--resume`` read a population's member as any run). ``env_state``: the env's
        ``state_dict()``, when the caller read it once for every member."""
        env_state = self.env.state_dict() if env_state is None else env_state
        rows = self.member_rows(k)
        return {
            "learner": self.config.run.algo,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "optimizer": self.member_optimizer_state(k),
            "env": self.member_env_state(k, env_state),
            "device": self.device.type,
            "generator": self.generators[k].get_state(),
            "torch_rng": torch.get_rng_state(),
            "model": self.member_weights(k),
            **{name: t[rows].cpu().clone() for name, t in self.carried().items()},
        }

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit (a solo run: its one member's state)."""
        return self.member_state(0)

    def load_state_dict(self, state: dict) -> None:
        self.load_members([state])

    def load_members(self, states: list[dict]) -> None:
        """Continue from each member's checkpoint state, in member order: every state checked
        as a solo run's (``check_member_state``) before anything changes, then loaded."""
        if len(states) != self.num_members:
            raise ConfigError(f"{len(states)} member states for {self.num_members} members")
        for k, state in enumerate(states):
            try:
                self.check_member_state(k, state)
            except ConfigError as exc:
                exc.member = k  # the runner names the member in a population's line
                raise
        steps = {(int(s["global_step"]), int(s["iteration"])) for s in states}
        if len(steps) != 1:
            raise ConfigError(
                "the members' checkpoints are at different steps (a run stopped while saving "
                "them); resume each member alone with --resume SEED_DIR"
            )
        self.load_env(states)
        for k, state in enumerate(states):
            self.load_member(k, state)
            rows = self.member_rows(k)
            for name, tensor in self.carried().items():
                if name in state:
                    tensor[rows].copy_(state[name])
        ((self.global_step, self.iteration),) = steps
        torch.set_rng_state(states[0]["torch_rng"])
        if self.rates_on_device:  # the loaded rates as the fused Adam reads them on cuda
            graph_safe_optimizer(self.optimizer, self.device)
        self.resume_learning_rate()

    def check_member_state(self, k: int, state: dict) -> None:
        """Refuse, with one line and changing nothing, a checkpoint state of another learner or
        device, or one whose fields are missing, ill-typed or do not fit member ``k``
        (``fasttrain.learners.savedstate``); a learner adds its own checks."""
        algo = self.config.run.algo
        savedstate.table(state, "state")
        savedstate.check_common(state, resuming=True)
        learner = state.get("learner", algo)
        if learner != algo:
            raise ConfigError(
                f"checkpoint was written by learner {learner!r} and this run uses {algo!r}; "
                f"resume it with run.algo = {learner!r}"
            )
        saved = state.get("device", "cpu")
        if saved != self.device.type:
            raise ConfigError(
                f"checkpoint was written on device {saved!r} and this run is on "
                f"{self.device.type!r}; resume it with run.device = {saved!r}"
            )
        savedstate.field(state, "env", "the environments' state")  # checked by env itself
        network, optimizer = self.references()
        expected = "this run's optimizer state"
        savedstate.optimizer_state(savedstate.field(state, "optimizer", expected), optimizer)
        generator = savedstate.field(state, "generator", "a generator state")
        savedstate.generator_state(generator, "generator", self.generator.device)
        cpu_stream = savedstate.field(state, "torch_rng", "a generator state")
        savedstate.generator_state(cpu_stream, "torch_rng", torch.device("cpu"))
        savedstate.weights(savedstate.field(state, "model", "network weights"), "model", network)
        rows, below = self.member_rows(k), {"next_obs": self.env.spec.obs_categories}
        for name, tensor in self.carried().items():
            if name in self.optional_carried and name not in state:
                continue
            value = savedstate.field(state, name, "the rollout's starting point")
            savedstate.like(value, name, tensor[rows], below.get(name, 0))

    def load_env_arrays(self, arrays) -> None:
        """The environments' saved buffers (checked by the env: one line for a value the game
        cannot produce, or a buffer of the wrong shape)."""
        try:
            self.env.load_state_dict(arrays)
        except StateError as exc:  # a value the game cannot produce: a damaged or crafted file
            raise ConfigError(f"checkpoint refused: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"checkpoint does not fit this run: {exc}") from None

    def resume_learning_rate(self) -> None:
        """After a checkpoint's optimizer state (which holds the rate it was written with):
        the rate of this run's config at the resumed iteration, so a ``learning_rate`` or
        ``anneal_lr`` changed on --resume takes effect. A rate equal to the checkpoint's in
        float32 is left as the checkpoint held it (a float, or a tensor a compiled step
        reads): an unchanged resume continues bit for bit."""
        if self.iteration >= self.num_iterations or not hasattr(self.args, "learning_rate"):
            return  # nothing left to train, or no rate in the config to follow
        schedule = self.scheduled_learning_rate
        rates = [schedule(a) for a in self.member_args]
        held = self.learning_rates()
        if any(np.float32(h) != np.float32(r) for h, r in zip(held, rates, strict=True)):
            self.set_learning_rates(schedule)

    def scheduled_learning_rate(self, args) -> float:
        """The rate the config section ``args`` gives the next update: ``learning_rate``,
        ``annealed`` where the learner anneals it (``anneal_lr``); a learner with another
        schedule overrides this."""
        if not getattr(args, "anneal_lr", False):
            return args.learning_rate
        return annealed(args.learning_rate, self.iteration, self.num_iterations)


def update_rate(trainer, updates: int = 3) -> float:
    """Samples/s of a rollout learner's update alone (``Learner.ceiling`` of PPO and PQN): the
    same update, every epoch and minibatch of the loss, backward and optimizer step, on the
    trainer's rollout storage, without the rollout."""
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

"""What every population learner shares (issue 53): ``M`` members, one per seed, trained side by
side in one process as each would train alone.

``PopulationBase`` starts the run as the solo trainer does (``start_run``: device, threads,
precision, one-line refusals) with ``M * num_envs`` environments, member ``k``'s block seeded as
its solo run (``fasttrain.make(seed=[...])``); builds each member's network as its solo run
would (``population.build_members``) into one ``Population`` (stacked weights, one batched
forward); gives each member its own random stream, seeded as its solo run's; and steps one
``PopulationAdam`` (a step count, moments and learning rate per member, each member's gradient
clipped by its own norm, a non-finite member skipped alone). It also holds what turns the
population into its members and back: a member's state in its solo learner's checkpoint form
(``member_state``, so ``eval``, ``play`` and a solo ``--resume`` read it), the population put
together from those (``load_members``), and the population's own state.

A learner's population (``ppo_population.PopulationTrainer``, ``pqn_population.
PQNPopulationTrainer``) adds its rollout, its returns and its update, drawing from member
``k``'s stream what the solo trainer draws, in the same order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch.func import functional_call

from fasttrain import distributed
from fasttrain.errors import ConfigError
from fasttrain.kernels.env import check_seeds
from fasttrain.learners.base import Timers, check_memory, start_run
from fasttrain.learners.graphs import (
    GraphedCall,
    GraphedUpdate,
    rollout_graph,
    run_rollout,
    tensor_addresses,
)
from fasttrain.learners.optim import adam
from fasttrain.population import BoundMethod, Population, build_members
from fasttrain.population_optim import PopulationAdam, population_step


def learner_problem(config, algo: str) -> str | None:
    """What no population trains, whatever its learner (one line): another learner than
    ``algo``, an optimizer other than Adam (``PopulationAdam``), fp16's loss scaler."""
    if config.run.algo != algo:
        return f"a {algo.upper()} population needs run.algo = {algo!r}, got {config.run.algo!r}"
    if config.learner.optimizer != "adam":
        return f"a population steps Adam, not {algo}.optimizer = {config.learner.optimizer!r}"
    if config.run.amp == "fp16":
        return "a population has no fp16 loss scaler: run.amp = 'off' or 'bf16'"
    return None


def variants_problem(config, member_configs, variable) -> str | None:
    """None where every member config differs from ``config`` only in its seed and in the
    learner settings named in ``variable``, else the first other difference (one line)."""

    def settings(c):
        out = {f"run.{k}": v for k, v in dataclasses.asdict(c.run).items() if k != "seed"}
        out.update({f"model.{k}": v for k, v in dataclasses.asdict(c.model).items()})
        out.update({f"game.{c.game.name}.{k}": v for k, v in vars(c.params).items()})
        algo = c.run.algo
        learner = dataclasses.asdict(c.learner)
        out.update({f"{algo}.{k}": v for k, v in learner.items() if k not in variable})
        out["game"] = c.game.name
        return out

    base = settings(config)
    for member in member_configs:
        theirs = settings(member)
        for key in sorted(set(base) | set(theirs)):
            if base.get(key) != theirs.get(key):
                allowed = ", ".join(f"{config.run.algo}.{k}" for k in variable)
                return f"members differ in {key}: a population's members may vary only {allowed}"
    return None


class PopulationBase:
    """``len(seeds)`` members of one learner side by side: the run, the networks, the streams,
    the optimizer and the members' states. Subclasses set ``ALGO`` and ``VARIABLE`` and
    implement ``problem``, the rollout, the update, ``iterate`` and ``carried``."""

    ALGO = ""
    VARIABLE: tuple[str, ...] = ()

    @staticmethod
    def problem(config) -> str | None:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def __init__(self, config, seeds, member_configs=None):
        problem = self.problem(config)
        if problem:
            raise ConfigError(problem)
        member_configs = list(member_configs or [config] * len(list(seeds)))
        problem = variants_problem(config, member_configs, self.VARIABLE)
        if problem:
            raise ConfigError(problem)
        try:
            self.seeds = seeds = check_seeds(list(seeds))
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        self.config, self.args = config, config.learner
        args = self.args
        self.num_members = M = len(seeds)
        if len(member_configs) != M:
            raise ConfigError(f"{len(member_configs)} member configs for {M} seeds")
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
        # the members' weights, gradients and Adam moments, refused in one line where they
        # cannot fit (sized from one member, built first)
        one = sum(p.numel() * p.element_size() for p in build_members(config, seeds[:1])[0]
                  .parameters())  # fmt: skip
        check_memory(4 * M * one, f"the population's networks and Adam state ({M} members)",
                     self.device, "train fewer members or a smaller [model]")  # fmt: skip
        members = build_members(config, seeds, self.device)
        self.template = members[0]  # a solo network, for a member's solo-format state
        self.population = Population(members)
        self.member_args = [mc.learner for mc in member_configs]
        self.lrs = self.each("learning_rate", torch.float64).cpu()
        self.optimizer = PopulationAdam(self.population, self.lrs, eps=1e-5)
        self.max_grad_norm = self.each("max_grad_norm")
        self.amp_dtype = self.ctx.amp_dtype
        self.iteration, self.global_step = 0, 0
        self.timers = Timers()
        self.horizon_graph: GraphedCall | None = None  # the subclass's rollout_graph()
        self.update_graph: GraphedUpdate | None = None  # set with it

    def each(self, name: str, dtype=torch.float32) -> torch.Tensor:
        """The members' values of learner setting ``name``, ``(M,)`` on the device."""
        values = [float(getattr(a, name)) for a in self.member_args]
        return torch.tensor(values, dtype=dtype, device=self.device)

    def by_member(self, rows: torch.Tensor) -> torch.Tensor:
        """A ``(rows, ...)`` tensor as ``(M, n, ...)``: member ``k``'s block of rows."""
        return rows.view(self.num_members, self.n, *rows.shape[1:])

    def member_call(self, k: int, *args, method: str = "forward"):
        """Member ``k``'s network's ``method(*args)`` (``forward``: on ``obs`` (B,
        *obs_shape)), as its solo network's."""
        stacked = self.population.stacked
        tensors = {n: p[k] for n, p in stacked.named_parameters()}
        tensors.update({n: b[k] for n, b in stacked.named_buffers()})
        base = self.population._base[0]
        if method == "forward":
            return functional_call(base, tensors, args)
        named = {f"module.{n}": t for n, t in tensors.items()}
        return functional_call(BoundMethod(base, method), named, args)

    # ------------------------------------------------------------------------ THE ROLLOUT

    def rollout_graph(self, generators, warn) -> GraphedCall | None:
        """On cuda (``run.cuda_graph``) the rollout's steps (``rollout_steps``) as one CUDA
        graph, ``generators`` (what the steps draw from) registered with it, and each
        minibatch step of the update as another (``update_graph``); None elsewhere, with one
        line where a cuda run cannot capture (``graphs.graph_problem``)."""
        graph = rollout_graph(self.config, self.device, self.rollout_steps, self.graph_key,
                              generators, self.env, warn)  # fmt: skip
        if graph is not None:
            # a population steps its own Adam (no host read, no scaler: fp16 and torchrun are
            # refused), so its update is captured wherever its rollout is
            self.update_graph = GraphedUpdate(self.minibatch_step, self.update_key, self.device)
        return graph

    def update_key(self, _slot=None) -> tuple:
        """What a captured minibatch step baked in: the members' tensors, the optimizer's."""
        state = [t for t in vars(self.optimizer).values() if torch.is_tensor(t)]
        return tensor_addresses(self.population), tuple(t.data_ptr() for t in state)

    def graph_key(self, _slot=None) -> tuple:
        """What a captured horizon baked in: the env's launch values, the members' tensors."""
        return (self.env.params_version, tensor_addresses(self.population))

    def run_steps(self, slot) -> None:
        """``rollout_steps(slot)``, one by one or as a graph (``graphs.run_rollout``)."""
        run_rollout(self.horizon_graph, self.rollout_steps, slot, self.timers)

    def minibatch_orders(self) -> torch.Tensor:
        """Each member's minibatch order over its own batch (``batch_size`` = its num_steps x
        num_envs), drawn from its own stream as the solo run draws it, as flat indices into the
        whole time-major ``(num_steps * rows)`` storage: ``(M, batch_size)``."""
        orders = torch.stack(
            [
                torch.randperm(self.batch_size, generator=g, device=self.device)
                for g in self.generators
            ]
        )
        # member k's flat index b = t * n + i is storage row t, column k * n + i
        members = torch.arange(self.num_members, device=self.device)[:, None]
        return orders // self.n * self.rows + members * self.n + orders % self.n

    def orders(self) -> tuple[torch.Tensor, int]:
        """An epoch's minibatch orders (``minibatch_orders``) and the minibatch size."""
        return self.minibatch_orders(), self.minibatch_size

    def minibatch_steps(self, width: int) -> torch.Tensor:
        """``update_epochs`` epochs of every member's minibatch steps (``losses`` of each
        minibatch, then one ``population_step``); returns the mean of the steps' stats,
        ``(M, width)``."""
        totals = torch.zeros(self.num_members, width, device=self.device)
        updates = 0
        step = self.minibatch_step if self.update_graph is None else self.update_graph
        for _epoch in range(self.args.update_epochs):
            order, size = self.orders()
            for start in range(0, order.shape[-1], size):
                totals += step(order[..., start : start + size])
                updates += 1
        return totals / updates

    def minibatch_step(self, mb: torch.Tensor) -> torch.Tensor:
        """One minibatch step of every member (``losses``, then one ``population_step``);
        returns its stats, ``(M, width)``: what a CUDA graph captures."""
        losses, stats = self.losses(mb)
        population_step(self.optimizer, losses, self.max_grad_norm)
        return stats

    def autocast(self):
        """The update's mixed precision, as the solo run's (``run.amp``)."""
        return torch.autocast(
            self.device.type, self.amp_dtype or torch.bfloat16, enabled=self.amp_dtype is not None
        )

    @property
    def updates_per_iteration(self) -> int:
        return self.args.update_epochs * self.args.num_minibatches

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

    def carried(self) -> dict[str, torch.Tensor]:
        """The rollout state that carries over to the next iteration, by checkpoint key:
        ``(rows, ...)`` tensors whose member blocks are the solo runs' (``next_obs``...)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Everything needed to continue the whole population bit for bit (host copies)."""
        return {
            "learner": f"{self.ALGO}-population",
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
            **{name: t.cpu().clone() for name, t in self.carried().items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` output of a population of the same seeds and sizes;
        one line (``ConfigError``) where it does not fit, before anything changes."""
        kind = f"{self.ALGO}-population"
        if not isinstance(state, dict) or state.get("learner") != kind:
            raise ConfigError(f"not a {self.ALGO.upper()} population's state")
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
        carried = self.carried()
        for name, tensor in carried.items():
            saved = state.get(name)
            if not isinstance(saved, torch.Tensor) or saved.shape != tensor.shape:
                raise ConfigError(f"the state's {name} does not fit this population")
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
        for name, tensor in carried.items():
            tensor.copy_(state[name])

    # ------------------------------------------------------------------ MEMBERS AS SOLO RUNS

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        """Member ``k``'s state in its solo trainer's checkpoint form (``state_dict`` of
        ``ppo.Trainer`` or ``pqn.Trainer``): its weights, its Adam state as ``torch.optim.Adam``
        keeps it, its block of the env buffers, its random stream, where its next rollout
        starts. ``env_state``: ``env.state_dict()``, when the caller read it once for every
        member."""
        rows = slice(k * self.n, (k + 1) * self.n)
        env_state = self.env.state_dict() if env_state is None else env_state
        return {
            "learner": self.ALGO,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "optimizer": self.solo_optimizer_state(k),
            "env": {name: array[rows].copy() for name, array in env_state.items()},
            "device": self.device.type,
            "generator": self.generators[k].get_state(),
            "torch_rng": torch.get_rng_state(),
            "model": self.population.member_state_dict(k),
            **{name: t[rows].cpu().clone() for name, t in self.carried().items()},
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
            carried = {
                name: torch.cat([torch.as_tensor(st[name]) for st in states])
                for name in self.carried()
            }
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as exc:
            raise ConfigError(
                f"a member's checkpoint does not fit this population: {exc}"
            ) from None
        self.load_state_dict(
            {
                "learner": f"{self.ALGO}-population",
                "seeds": list(self.seeds),
                "global_step": global_step,
                "iteration": iteration,
                "weights": weights,
                "optimizer": optimizer,
                "env": env,
                "generators": [st["generator"] for st in states],
                **carried,
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

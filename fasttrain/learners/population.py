"""A population: ``M`` members of one learner, one per seed (or per variant of the settings its
registration lets members vary), trained side by side in one process as each would train alone.

A population is a width of the same trainer, not a second one: ``members_of(Trainer)`` is the
learner's own trainer with ``Members`` overriding the width hooks of ``learners/base.py``, and
nothing else (purejaxql and PureJaxRL map one train function over seeds the same way). Member
``k``'s environments are a block of the run's rows seeded as its solo run's
(``fasttrain.make(seed=[...])``); its network is built as its solo run builds it
(``build_members``: the same initial weights bit for bit) into one ``Population`` (stacked
weights, one batched call); it samples from its own stream what the solo run samples, in the
same order; ``PopulationAdam`` (``learners/optim.py``) steps each member with its own step
count, moments, learning rate and gradient clip, and skips a non-finite member alone. So member
``k`` sees the same observations and takes the same actions as the solo run with its seed, its
updates equal up to the float rounding of batched matrix products. A member's checkpoint is a
solo run's, read back through the same checks (``TrainerBase.load_members``).
"""

from __future__ import annotations

import copy
import dataclasses
from functools import cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from fasttrain import games
from fasttrain.device import check_memory
from fasttrain.errors import ConfigError
from fasttrain.kernels.rng import check_seeds
from fasttrain.learners import LEARNERS, MAX_MEMBERS, distributed
from fasttrain.learners.context import one_torch_thread
from fasttrain.learners.optim import PopulationAdam, adam


def population_problem(config) -> str | None:
    """None where ``config`` can train as a population, else why not (one line): what no
    population trains whatever its learner, then what its learner's registration says."""
    algo, learner = config.run.algo, LEARNERS[config.run.algo]
    if learner.population is None:
        able = [name for name, one in LEARNERS.items() if one.population is not None]
        return f"a population trains {' or '.join(able)}, not run.algo = {algo!r}"
    if config.learner.optimizer != "adam":
        return f"a population steps Adam, not {algo}.optimizer = {config.learner.optimizer!r}"
    if config.run.amp == "fp16":
        return "a population has no fp16 loss scaler: run.amp = 'off' or 'bf16'"
    if config.run.compile not in ("off", "auto"):
        return "a population runs its steps eagerly: run.compile = 'off'"
    if config.curriculum:
        return "a population has no curriculum: leave [[curriculum.stage]] out"
    spec = games.get(config.game.name)
    if spec.agents(config.params) != 1:
        return f"a population trains single-agent games; {config.game.name} has several agents"
    return learner.population(config)


def variants_problem(config, member_configs) -> str | None:
    """None where every member config differs from ``config`` only in its seed and in the
    settings the learner lets members vary, else the first other difference (one line)."""
    variable = LEARNERS[config.run.algo].variable

    def settings(c):
        out = {f"run.{k}": v for k, v in dataclasses.asdict(c.run).items() if k != "seed"}
        out.update({f"model.{k}": v for k, v in dataclasses.asdict(c.model).items()})
        out.update({f"game.{c.game.name}.{k}": v for k, v in vars(c.params).items()})
        learner = dataclasses.asdict(c.learner)
        out.update({f"{c.run.algo}.{k}": v for k, v in learner.items() if k not in variable})
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


def build_members(make, seeds) -> list[nn.Module]:
    """``make()`` once per seed, each as the solo run with that seed builds its network (torch
    seeded with it, one thread: the same initial weights bit for bit). The caller's torch
    random stream is left as it was."""
    members = []
    with torch.random.fork_rng(devices=[]):
        for seed in seeds:
            torch.manual_seed(seed)
            with one_torch_thread():
                members.append(make())
    return members


# ------------------------------------------------------------------------ THE NETWORK


_ACTIVATIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu}
# a member's float input above this many bytes runs member by member: four Snake members'
# minibatch (4 x 4,096 x 576 floats, 38 MB) at once ran 1.3x slower than one after another
MEMBER_CHUNK_BYTES = 4 << 20


def mlp_plan(module: nn.Module) -> list[tuple] | None:
    """A feed-forward MLP actor-critic's or Q-network's torso as steps the batched fast path
    runs (``("flatten",)``, ``("linear", name)``, ``("act", fn)``, ``("norm", name, eps)``);
    None for any other network (a CNN, a recurrent core, a dueling Q-network)."""
    from fasttrain.models import ActorCritic, QNetwork

    actor_critic = type(module) is ActorCritic
    q_network = type(module) is QNetwork and module.value_head is None
    if not (actor_critic or q_network) or not isinstance(module.torso, nn.Sequential):
        return None
    plan: list[tuple] = []
    for i, layer in enumerate(module.torso):
        if isinstance(layer, nn.Flatten) and (layer.start_dim, layer.end_dim) == (1, -1):
            plan.append(("flatten",))
        elif type(layer) is nn.Linear:
            plan.append(("linear", f"torso.{i}"))
        elif type(layer) in _ACTIVATIONS:
            plan.append(("act", _ACTIVATIONS[type(layer)]))
        elif (
            type(layer) is nn.LayerNorm
            and len(layer.normalized_shape) == 1
            and layer.elementwise_affine
            and layer.bias is not None
        ):
            plan.append(("norm", f"torso.{i}", layer.eps))
        else:
            return None
    return plan


class Population(nn.Module):
    """Members' weights stacked along a leading axis ``M``; one batched call runs all of them,
    each tensor argument with the member axis first (a solo network's methods with a member
    axis: ``forward``, ``value``, ``unroll``).

    ``stacked`` is a copy of a member's module whose every parameter and buffer has the leading
    member axis (``state_dict`` keys are a member's own); its parameters are this module's,
    blocks of one flat tensor (``flat``; ``member_of`` names each element's member), so the
    optimizer steps them all in a few operations.
    """

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("a population needs at least one member, got none")
        first = members[0]
        shapes = {k: v.shape for k, v in first.state_dict().items()}
        for k, member in enumerate(members):
            theirs = {key: v.shape for key, v in member.state_dict().items()}
            if type(member) is not type(first) or theirs != shapes:
                raise ValueError(f"member {k} is not the same network as member 0")
        params, buffers = stack_module_state(members)
        # the module vmap calls: no memory of its own (its tensors are swapped in per call)
        self._base = (copy.deepcopy(first).to("meta"),)  # a tuple: not a registered submodule
        self.stacked = copy.deepcopy(self._base[0])
        tensors = [t.detach() for t in params.values()]
        self.flat = torch.cat([t.reshape(-1) for t in tensors])
        members_axis = torch.arange(len(members), device=self.flat.device)
        self.member_of = torch.cat([members_axis.repeat_interleave(t[0].numel()) for t in tensors])
        offset = 0
        for name, tensor in zip(params, tensors, strict=True):
            view = self.flat[offset : offset + tensor.numel()].view(tensor.shape)
            self._set(name, view, parameter=True)
            offset += tensor.numel()
        for name, tensor in buffers.items():
            self._set(name, tensor, parameter=False)
        self.num_members = len(members)
        self.is_recurrent = getattr(first, "is_recurrent", False)
        self.state_size = getattr(first, "state_size", None)
        # an MLP actor-critic or Q-network runs as batched matrix products, not under vmap
        # (whose per-call cost was most of a small network's step: CartPole, 8 members)
        self._plan = mlp_plan(first)
        self._q = not hasattr(first, "actor")

    def _set(self, name: str, tensor: torch.Tensor, parameter: bool) -> None:
        """Put ``tensor`` at the dotted ``name`` of ``stacked`` as a parameter or a buffer."""
        path, _, leaf = name.rpartition(".")
        owner = self.stacked.get_submodule(path) if path else self.stacked
        if parameter:
            owner.register_parameter(leaf, nn.Parameter(tensor))
        else:
            owner.register_buffer(leaf, tensor)

    def __len__(self) -> int:
        return self.num_members

    def tensors(self, k=slice(None)) -> dict:
        """The members' (or member ``k``'s) parameters and buffers by a member's names."""
        stacked = self.stacked
        return {n: t[k] for n, t in (*stacked.named_parameters(), *stacked.named_buffers())}

    def call(self, method: str, *args):
        """Every member's ``method(*args)`` at once under ``vmap``: each tensor argument has
        the member axis first (``None`` and other values are shared); the outputs are stacked
        over members, ``None`` outputs stay ``None``."""
        nones = []  # positions of None outputs (vmap returns tensors only)

        def one(tensors, *a):
            out = call_method(self._base[0], method, tensors, a)
            if not isinstance(out, tuple):
                return out
            nones[:] = [i for i, o in enumerate(out) if o is None]
            return tuple(o for o in out if o is not None)

        in_dims = (0, *(0 if isinstance(a, torch.Tensor) else None for a in args))
        out = vmap(one, in_dims=in_dims)(self.tensors(), *args)
        if not isinstance(out, tuple):
            return out
        out = list(out)
        for i in nones:
            out.insert(i, None)
        return tuple(out)

    def forward(self, obs: torch.Tensor, *args):
        """Every member's ``forward(obs[k], *args[k])`` stacked: obs ``(M, n, *obs_shape)``; an
        actor-critic gives ``(logits (M, n, A), values (M, n), state)``, a Q-network its
        Q-values ``(M, n, A)``."""
        if self._plan is not None:  # feed-forward: a state and restart flags change nothing
            return self._mlp_forward(obs)
        return self.call("forward", obs, *args)

    def value(self, obs: torch.Tensor, state=None) -> torch.Tensor:
        return self.call("value", obs, state)

    def unroll(self, obs, initial, starts):
        return self.call("unroll", obs, initial, starts)

    def _linear(self, name: str, x: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """The ``members``' linear layer ``name`` on their own rows: ``x`` (m, n, in)."""
        weight = self.stacked.get_parameter(f"{name}.weight")[members]  # (m, out, in)
        bias = self.stacked.get_parameter(f"{name}.bias")[members]  # (m, out)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def _mlp_forward(self, obs: torch.Tensor):
        """``forward`` of an MLP (``mlp_plan``) as batched matrix products; a large input
        member by member (``MEMBER_CHUNK_BYTES``)."""
        per_member = obs[0].numel() * 4  # bytes of one member's float input
        if per_member < MEMBER_CHUNK_BYTES or len(obs) == 1:
            return self._mlp_members(obs, slice(None))
        outs = [self._mlp_members(obs[k : k + 1], slice(k, k + 1)) for k in range(len(obs))]
        if self._q:
            return torch.cat(outs)
        return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs]), None

    def _mlp_members(self, obs: torch.Tensor, members: slice):
        x = self._base[0].encoder(obs)  # parameter-free: runs on the real tensors
        for step in self._plan:
            if step[0] == "flatten":
                x = x.flatten(2)
            elif step[0] == "linear":
                x = self._linear(step[1], x, members)
            elif step[0] == "norm":  # each member's LayerNorm: the normalisation, its affine
                weight = self.stacked.get_parameter(f"{step[1]}.weight")[members]  # (m, H)
                bias = self.stacked.get_parameter(f"{step[1]}.bias")[members]
                normal = F.layer_norm(x, x.shape[-1:], eps=step[2])
                x = torch.addcmul(bias.unsqueeze(1), normal, weight.unsqueeze(1))
            else:
                x = step[1](x)
        if self._q:
            return self._linear("head", x, members)
        logits = self._linear("actor", x, members)
        return logits, self._linear("critic", x, members).squeeze(-1), None

    def member_state_dict(self, k: int) -> dict:
        """Member ``k``'s weights as a solo network's ``state_dict`` (copies)."""
        return {n: t[k].detach().clone() for n, t in self.stacked.state_dict().items()}

    @torch.no_grad()
    def load_member(self, k: int, state_dict: dict) -> None:
        """A solo network's ``state_dict`` (checked: ``savedstate.weights``) into member
        ``k``'s slice."""
        for name, tensor in self.stacked.state_dict().items():
            tensor[k].copy_(state_dict[name])


def call_method(module: nn.Module, method: str, tensors: dict, args: tuple):
    """``module.<method>(*args)`` with ``tensors`` as its parameters and buffers."""
    if method == "forward":
        return functional_call(module, tensors, args, strict=True)
    named = {f"module.{n}": t for n, t in tensors.items()}  # the wrapper's prefix
    return functional_call(BoundMethod(module, method), named, args, strict=True)


class BoundMethod(nn.Module):
    """``module.<method>`` as a module's forward, so ``functional_call`` can call it."""

    def __init__(self, module: nn.Module, method: str):
        super().__init__()
        self.module, self.method = module, method

    def forward(self, *args):
        return getattr(self.module, self.method)(*args)


class MemberNet:
    """Member ``k`` of a ``Population`` called as its solo network (a forward, ``value``)."""

    def __init__(self, population: Population, k: int):
        self.population, self.k = population, k

    def __call__(self, *args):
        return self.call("forward", args)

    def value(self, *args):
        return self.call("value", args)

    def call(self, method: str, args: tuple):
        population = self.population
        return call_method(population._base[0], method, population.tensors(self.k), args)


# ------------------------------------------------------------------------ THE WIDTH


class Members:
    """``TrainerBase``'s width hooks for ``M`` members (mixed in before a learner's trainer by
    ``members_of``); the trainer's own code is unchanged."""

    member_dims = 1

    @property
    def member_shape(self) -> tuple:
        return (self.num_members,)

    def __init__(self, config, warn=print, members=None):
        members = list(members) if members is not None else [config]
        problem = population_problem(config) or variants_problem(config, members)
        if problem:
            raise ConfigError(problem)
        try:
            self.seeds = check_seeds([c.run.seed for c in members])
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        if len(members) > MAX_MEMBERS:
            raise ConfigError(f"{len(members)} members: at most {MAX_MEMBERS} in one process")
        super().__init__(config, warn=warn, members=members)

    def env_seeds(self):
        return list(self.seeds)

    def member_generators(self) -> list[torch.Generator]:
        return [
            torch.Generator(device=self.device).manual_seed(distributed.rank_seed(s, 0) % 2**63)
            for s in self.seeds
        ]

    def compile_mode_for(self, *args, **kwargs) -> str:
        return "off"  # population_problem refuses a compile asked for by name

    def build(self, make, eps: float):
        M, one = self.num_members, build_members(make, self.seeds[:1])[0]
        size = sum(p.numel() * p.element_size() for p in one.parameters())
        check_memory(
            4 * M * size,
            f"the population's networks and Adam state ({M} members)",
            self.device,
            "train fewer members or a smaller [model]",
        )
        networks = build_members(make, self.seeds)
        self.template = networks[0]  # a solo network: what a member's saved weights fit
        population = Population(networks)
        lrs = [a.learning_rate for a in self.member_args]
        self.template_optimizer = adam(self.template.parameters(), lrs[0], eps)
        return population, PopulationAdam(population, lrs, eps)

    def by_member(self, rows):
        """A ``(rows, ...)`` tensor as ``(M, n, ...)``: member ``k``'s block of rows."""
        return None if rows is None else rows.view(self.num_members, self.n, *rows.shape[1:])

    def act(self, forward, *inputs):
        out = forward(*(self.by_member(x) for x in inputs))
        if isinstance(out, torch.Tensor):
            return out.reshape(self.rows, *out.shape[2:])
        return tuple(o if o is None else o.reshape(self.rows, *o.shape[2:]) for o in out)

    def member_net(self, k: int) -> MemberNet:
        return MemberNet(self.acting, k)

    def member_groups(self, rows: tuple) -> list:
        if not rows[0].numel():
            return []
        owner = rows[1] // self.n
        return [(k, tuple(r[owner == k] for r in rows)) for k in torch.unique(owner).tolist()]

    def blocks(self, tensor: torch.Tensor, axis: int = 0) -> list[torch.Tensor]:
        return list(tensor.split(self.n, dim=axis))

    def member_axis(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def per_member(self, fn, dtype=torch.float32):
        values = [float(fn(a)) for a in self.member_args]
        return torch.tensor(values, dtype=dtype, device=self.device)

    def per_sample(self, fn):
        return self.per_member(fn)[:, None]

    def per_column(self, fn) -> torch.Tensor:
        values = torch.tensor([float(fn(a)) for a in self.member_args], dtype=torch.float64)
        return values.repeat_interleave(self.n)

    def set_learning_rates(self, fn) -> None:
        self.optimizer.set_learning_rates([fn(a) for a in self.member_args])

    def learning_rates(self) -> list[float]:
        return self.optimizer.lrs.tolist()

    def member_weights(self, k: int) -> dict:
        return self.network.member_state_dict(k)

    def member_optimizer_state(self, k: int) -> dict:
        return self.optimizer.member_state(k, self.template_optimizer)

    def member_env_state(self, k: int, env_state: dict) -> dict:
        rows = self.member_rows(k)
        return {name: array[rows].copy() for name, array in env_state.items()}

    def member_stats(self) -> list[dict]:
        arrays = self.env.arrays
        sums = {
            name: self.env.to_host(arrays[f"done_{name}"]).reshape(self.num_members, -1).sum(1)
            for name in ("return", "length", "score", "count")
        }
        out = []
        for k in range(self.num_members):
            count = int(sums["count"][k])
            if not count:  # no episode ended: nothing to report, as VecEnv.stats
                out.append({})
                continue
            means = {n: float(sums[n][k]) / count for n in ("return", "length", "score")}
            out.append({**means, "episodes": count})
        self.env.stats()  # clears every env's sums
        return out

    def references(self) -> tuple:
        return self.template, self.template_optimizer

    def load_member(self, k: int, state: dict) -> None:
        self.network.load_member(k, state["model"])
        self.optimizer.load_member(k, state["optimizer"])
        self.generators[k].set_state(state["generator"])

    def load_env(self, states: list[dict]) -> None:
        names = states[0]["env"].keys()
        self.load_env_arrays({n: np.concatenate([s["env"][n] for s in states]) for n in names})


@cache
def members_of(trainer: type) -> type:
    """The population class of a learner's ``trainer``: its width hooks made ``Members``'."""
    return type(f"{trainer.__name__}Population", (Members, trainer), {"__module__": __name__})

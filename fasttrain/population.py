"""N members' networks as one batched network with stacked weights (issue 53's population runs).

A population trains one member per seed (or per hyperparameter variant) in one process. This
module is the network side of it: ``build_members`` builds each member's network exactly as the
solo trainer with ``run.seed = seeds[k]`` would (the same random draws, so the same initial
weights bit for bit), and ``Population`` holds their weights stacked along a leading member axis
``M`` (``torch.func.stack_module_state``) as its own parameters, so one optimizer takes them, and
runs every member's forward in one batched call (``torch.func.functional_call`` under
``torch.func.vmap``). Member ``k``'s slice gets exactly the gradient its solo network would.

``fasttrain run --seeds`` trains with it (``learners/ppo_population.py``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from fasttrain import games
from fasttrain.learners.base import one_torch_thread
from fasttrain.models import ActorCritic, QNetwork, make_policy, make_q_network

# learners whose trainer builds one network this module can reproduce, and how
POLICY_LEARNERS = ("ppo",)
Q_LEARNERS = ("pqn",)


def build_members(config, seeds, device="cpu") -> list[nn.Module]:
    """Member ``k``'s network, for each ``seeds[k]``: the solo trainer's with ``run.seed =
    seeds[k]`` on ``device``, its initial weights bit for bit. The caller's torch random stream
    is left as it was."""
    algo = config.run.algo
    if algo not in POLICY_LEARNERS + Q_LEARNERS:
        valid = ", ".join(POLICY_LEARNERS + Q_LEARNERS)
        raise ValueError(f"a population needs run.algo in ({valid}), got {algo!r}")
    spec = games.get(config.game.name)
    params = config.params
    shape = tuple(spec.obs_shape(params))
    num_actions, categories = spec.actions(params), spec.obs_categories
    members = []
    with torch.random.fork_rng(devices=[]):
        for seed in seeds:
            # as start_run, then the trainer: seed, then build on one thread (see one_torch_thread)
            torch.manual_seed(seed)
            with one_torch_thread():
                if algo in POLICY_LEARNERS:
                    net = make_policy(
                        shape, spec.obs_dtype, num_actions, config.model, device, categories
                    )
                else:
                    net = make_q_network(
                        shape,
                        spec.obs_dtype,
                        num_actions,
                        config.model,
                        device,
                        obs_categories=categories,
                        layer_norm=config.learner.layer_norm,
                    )
            members.append(net)
    return members


_ACTIVATIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu}
# a member's float input above this many bytes runs member by member: four Snake members'
# minibatch (4 x 4,096 x 576 floats, 38 MB) at once ran 1.3x slower than one after another
MEMBER_CHUNK_BYTES = 4 << 20


def mlp_plan(module: nn.Module) -> list[tuple] | None:
    """A feed-forward MLP actor-critic's or Q-network's torso as steps the batched fast path
    runs (``("flatten",)``, ``("linear", name)``, ``("act", fn)``, ``("norm", name, eps)``);
    None for any other network (a CNN, a recurrent core, a dueling Q-network)."""
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


def _set_tensor(module: nn.Module, name: str, tensor: torch.Tensor, parameter: bool) -> None:
    """Put ``tensor`` at the dotted ``name`` of ``module`` as a parameter or a buffer."""
    path, _, leaf = name.rpartition(".")
    owner = module.get_submodule(path) if path else module
    if parameter:
        owner.register_parameter(leaf, nn.Parameter(tensor))
    else:
        owner.register_buffer(leaf, tensor)


class Population(nn.Module):
    """Members' weights stacked along a leading axis ``M``; one batched call runs all of them.

    ``stacked`` is a copy of a member's module whose every parameter and buffer has the leading
    member axis (``state_dict`` keys are a member's own); its parameters are this module's.
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
        # every parameter a contiguous block of one flat tensor, so the optimizer steps them
        # all in a few operations (``PopulationAdam``); ``member_of`` names each element's member
        tensors = [t.detach() for t in params.values()]
        self.flat = torch.cat([t.reshape(-1) for t in tensors])
        M = len(members)
        self.member_of = torch.cat(
            [torch.arange(M, device=self.flat.device).repeat_interleave(t[0].numel())
             for t in tensors]
        )  # fmt: skip
        offset = 0
        for name, tensor in zip(params, tensors, strict=True):
            view = self.flat[offset : offset + tensor.numel()].view(tensor.shape)
            _set_tensor(self.stacked, name, view, parameter=True)
            offset += tensor.numel()
        for name, tensor in buffers.items():
            _set_tensor(self.stacked, name, tensor, parameter=False)
        self.num_members = len(members)
        # an MLP actor-critic or Q-network runs as batched matrix products, not under vmap
        # (whose per-call cost was most of a small network's step: CartPole, 8 members)
        self._plan = mlp_plan(first)
        self._q = type(first) is QNetwork

    def __len__(self) -> int:
        return self.num_members

    def call(self, method: str, *args):
        """Every member's ``method(*args)`` at once: each tensor argument has the member axis
        first (``None`` and other values are shared); the outputs are stacked over members,
        ``None`` outputs stay ``None``."""
        base = self._base[0]
        weights = dict(self.stacked.named_parameters())
        buffers = dict(self.stacked.named_buffers())
        nones = []  # positions of None outputs (vmap returns tensors only)

        def one(p, b, *a):
            if method == "forward":
                out = functional_call(base, (p, b), a, strict=True)
            else:  # the method as a wrapper's forward: its names gain the wrapper's prefix
                named = ({f"module.{n}": t for n, t in d.items()} for d in (p, b))
                out = functional_call(BoundMethod(base, method), tuple(named), a, strict=True)
            if not isinstance(out, tuple):
                return out
            nones[:] = [i for i, o in enumerate(out) if o is None]
            return tuple(o for o in out if o is not None)

        in_dims = (0, 0, *(0 if isinstance(a, torch.Tensor) else None for a in args))
        out = vmap(one, in_dims=in_dims)(weights, buffers, *args)
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
        if self._plan is not None and all(a is None for a in args):
            return self._mlp_forward(obs)
        return self.call("forward", obs, *args)

    def _linear(self, name: str, x: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """The ``members``' linear layer ``name`` on their own rows: ``x`` (m, n, in)."""
        weight = self.stacked.get_parameter(f"{name}.weight")[members]  # (m, out, in)
        bias = self.stacked.get_parameter(f"{name}.bias")[members]  # (m, out)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def _mlp_forward(self, obs: torch.Tensor):
        """``forward`` of an MLP actor-critic (``mlp_plan``) as batched matrix products; a
        large input member by member (``MEMBER_CHUNK_BYTES``)."""
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
                x = torch.addcmul(
                    bias.unsqueeze(1),
                    F.layer_norm(x, x.shape[-1:], eps=step[2]),
                    weight.unsqueeze(1),
                )
            else:
                x = step[1](x)
        if self._q:
            return self._linear("head", x, members)
        logits = self._linear("actor", x, members)
        return logits, self._linear("critic", x, members).squeeze(-1), None

    def member_state_dict(self, k: int) -> dict:
        """Member ``k``'s weights as a solo network's ``state_dict`` (copies)."""
        self._check_index(k)
        return {n: t[k].detach().clone() for n, t in self.stacked.state_dict().items()}

    @torch.no_grad()
    def load_member(self, k: int, state_dict: dict) -> None:
        """Write a solo network's ``state_dict`` into member ``k``'s slice."""
        self._check_index(k)
        own = self.stacked.state_dict()
        if set(state_dict) != set(own):
            missing, extra = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
            raise ValueError(f"member {k}'s weights do not fit: missing {missing}, extra {extra}")
        for name, tensor in own.items():
            value = state_dict[name]
            if tuple(value.shape) != tuple(tensor.shape[1:]):
                raise ValueError(
                    f"member {k}'s {name} has shape {tuple(value.shape)}, the network's is "
                    f"{tuple(tensor.shape[1:])}"
                )
            tensor[k].copy_(value)

    def _check_index(self, k: int) -> None:
        if not 0 <= k < self.num_members:
            raise IndexError(f"member {k} out of range: the population has {self.num_members}")


class BoundMethod(nn.Module):
    """``module.<method>`` as a module's forward, so ``functional_call`` can call it."""

    def __init__(self, module: nn.Module, method: str):
        super().__init__()
        self.module = module
        self.method = method

    def forward(self, *args):
        return getattr(self.module, self.method)(*args)

"""Optimizers and the one optimizer step every learner takes, for one member or many: Adam or
Muon, learning rates a schedule fills in place, a population's Adam (``PopulationAdam``: each
member's own step count, moments, rate and gradient clip), and the step with its NaN guard
(skipped where the loss or a gradient is not finite; on a GPU, and for a population's members
always, taken and undone on the device with no host sync)."""

from __future__ import annotations

import time

import torch

from fasttrain.errors import ConfigError
from fasttrain.kernels.internals import resolve
from fasttrain.learners import distributed

# one kernel over a list of tensors (the masked step's backups, a target network's update)
foreach_copy = resolve("torch._foreach_copy_")
foreach_lerp = resolve("torch._foreach_lerp_")


class Optimizers:
    """Several optimizers stepped as one, each over its own parameters (Muon's matrices and
    Adam's rest); ``param_groups``, ``state`` and the state dict cover them all.

    On the CPU their learning rates are 0-d tensors that a schedule fills in place:
    torch.compile reads a float rate of optimizers stepped from a wrapper like this one as a
    constant, so an annealed rate compiled their step again every iteration (measured: one more
    graph per iteration, to dynamo's limit), where a tensor is an input."""

    def __init__(self, optimizers: list):
        self.optimizers = optimizers
        rates_as_tensors(self)

    @property
    def param_groups(self) -> list[dict]:
        return [group for o in self.optimizers for group in o.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for o in self.optimizers for p, s in o.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        states = state.get("optimizers") if isinstance(state, dict) else None
        if not isinstance(states, list) or len(states) != len(self.optimizers):
            raise ValueError("the checkpoint's optimizer is not this run's")
        for o, s in zip(self.optimizers, states, strict=True):
            o.load_state_dict(s)
        rates_as_tensors(self)  # a checkpoint may hold them as floats


def adam(params, lr: float, eps: float) -> torch.optim.Adam:
    """Adam, fused into one kernel per step where this torch and device support it (CUDA, and
    the CPU from torch 2.4), else the default implementation."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


def make_optimizer(name: str, model: torch.nn.Module, lr: float, eps: float = 1e-5):
    """``adam``: Adam over every parameter. ``muon``: ``torch.optim.Muon`` over the torso's
    weight matrices (learning rate scaled to match Adam's update size, so one learning rate
    serves both) and Adam over biases, convolutions and the output heads. Each group keeps
    the same rate (``set_learning_rate`` schedules them together)."""
    matrices = [p for n, p in model.named_parameters() if n.startswith("torso.") and p.ndim == 2]
    if name == "adam" or not matrices:
        optimizer = adam(model.parameters(), lr, eps)
    else:
        chosen = {id(p) for p in matrices}
        rest = [p for p in model.parameters() if id(p) not in chosen]
        muon = torch.optim.Muon(matrices, lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
        optimizer = Optimizers([muon, adam(rest, lr, eps)])
    return optimizer


def rates_as_tensors(optimizer) -> None:
    """The learning rates of fused Adam (and of ``Optimizers``) as 0-d tensors, which
    ``set_learning_rate`` fills in place: a compiled step reads a float rate as a constant and
    compiles again when a schedule changes it (once, then as a symbol). Unfused Adam keeps its
    float (older torch steps it with Python numbers), and so do parameters off the CPU (a CPU
    rate beside CUDA parameters is not measured: no GPU was at hand)."""
    for part in getattr(optimizer, "optimizers", [optimizer]):
        if isinstance(optimizer, Optimizers) or part.defaults.get("fused"):
            for group in part.param_groups:
                on_cpu = all(p.device.type == "cpu" for p in group["params"])
                if on_cpu and not torch.is_tensor(group["lr"]):
                    group["lr"] = torch.tensor(float(group["lr"]))


def set_learning_rate(optimizer, lr: float) -> None:
    """Every parameter group's learning rate to ``lr`` (a schedule's step)."""
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):  # Optimizers' rates: filled in place
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def optimizer_step(ctx, optimizer, loss, parameters, max_grad_norm) -> None:
    """Zero the gradients, backpropagate ``loss``, clip to ``max_grad_norm`` and step;
    skip the step (and count it in ``ctx.skipped``) when the loss or a gradient is not finite.

    ``loss`` may also be an iterable of losses (gradient accumulation): each is
    backpropagated as it comes, so its graph is freed before the next one is built, and
    their gradients add up before the one clip and step. A population's ``PopulationAdam``
    takes every member's loss, ``(M,)``, and clips and skips each member alone
    (``max_grad_norm`` one number or one per member).

    On the CPU the check reads one flag per step, which costs nothing; on a GPU that read
    would stall the pipeline, so the step is taken and undone on the device where the flag
    is false, and the count is read once per iteration with the losses.
    """
    parameters = list(parameters)
    optimizer.zero_grad(set_to_none=True)
    parts = getattr(optimizer, "optimizers", [optimizer])
    total = None
    for piece in (loss,) if isinstance(loss, torch.Tensor) else loss:
        if ctx.scaler is not None:
            ctx.scaler.scale(piece).backward()
        else:  # a population's members share no weight: the sum's gradient is each one's own
            (piece.sum() if piece.ndim else piece).backward()
        total = piece.detach() if total is None else total + piece.detach()
    if ctx.scaler is not None:
        for part in parts:
            ctx.scaler.unscale_(part)
    if ctx.ranks.enabled:  # one flat all-reduce: every rank steps with the mean gradient
        t0 = time.perf_counter()
        total = total.reshape(1).float().clone()  # the mean loss: the guard agrees too
        grads = [p.grad for p in parameters if p.grad is not None]
        distributed.all_reduce_mean([*grads, total], ctx.ranks.world)
        total = total[0]
        ctx.comm_s += time.perf_counter() - t0
    members = isinstance(optimizer, PopulationAdam)
    if members:
        norm = optimizer.clip_(max_grad_norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    finite = torch.isfinite(norm) & torch.isfinite(total)
    ctx.updates += 1
    if ctx.scaler is not None:  # GradScaler skips non-finite steps itself
        for part in parts:
            ctx.scaler.step(part)
        ctx.scaler.update()
        ctx.skipped += ~finite
    elif members:
        optimizer.step(finite)
        ctx.skipped += ~finite
    elif ctx.device.type == "cpu" and not ctx.masked_steps:
        if bool(finite):
            optimizer.step()
        else:
            ctx.skipped += 1
    else:
        masked_step(ctx, optimizer, parameters, finite)


@torch.no_grad()
def masked_step(ctx, optimizer, parameters, finite) -> None:
    """``optimizer.step()`` kept only where ``finite`` is true, with no host sync."""
    before = {id(t): t for t in _step_tensors(optimizer, parameters, finite.device)}
    backups = {key: _backup(ctx, t) for key, t in before.items()}
    foreach_copy(list(backups.values()), list(before.values()))
    optimizer.step()
    for t in _step_tensors(optimizer, parameters, finite.device):
        # state the step created (its first) starts from zero where the step is undone
        undo = backups.get(id(t)) if id(t) in before else torch.zeros_like(t)
        t.copy_(torch.where(finite, t, undo))
    ctx.skipped += ~finite


def _step_tensors(optimizer, parameters, device) -> list[torch.Tensor]:
    """Parameters and their optimizer state on ``device`` (Adam keeps its step counts on
    the CPU: those still advance on an undone step)."""
    tensors = list(parameters)
    for p in parameters:
        tensors += [t for t in optimizer.state.get(p, {}).values() if torch.is_tensor(t)]
    return [t for t in tensors if t.device == device and t.is_floating_point()]


def _backup(ctx, tensor: torch.Tensor) -> torch.Tensor:
    """The copy of ``tensor`` a masked step keeps, allocated once per tensor."""
    backup = ctx.backups.get(id(tensor))
    if backup is None or backup.shape != tensor.shape:
        backup = ctx.backups[id(tensor)] = torch.empty_like(tensor)
    return backup


class PopulationAdam:
    """Adam (``torch.optim.Adam``'s update, no weight decay, no amsgrad) for each member of a
    ``learners.population.Population`` at once, each as its solo run's: its own step count
    (a skipped member's bias correction does not advance), moments and learning rate (``lrs``,
    one per member, for per-member schedules and variants), shared ``eps`` and ``betas``.

    The population's parameters are blocks of one flat tensor, and so are the gradients (each
    parameter's ``.grad`` a view the backward pass adds into) and the moments: a step is a
    dozen operations for the whole network, each element reading its member's values through
    ``Population.member_of``; no loop over members, no host sync. Every parameter takes part
    in each step (a PPO or PQN network uses all of its weights in every loss)."""

    def __init__(self, population, lrs, eps: float = 1e-5, betas=(0.9, 0.999)):
        self.params = list(population.parameters())
        self.num_members = len(population)
        device = self.params[0].device
        self.flat, self.member_of = population.flat, population.member_of
        self.flat_grad = torch.zeros_like(self.flat)
        self.grads = self._views(self.flat_grad)
        # one rate per member, filled in place by set_learning_rates (float32, as a solo run's
        # rate held as a tensor: see rates_as_tensors)
        self.lrs = torch.zeros(self.num_members, dtype=torch.float32, device=device)
        self.set_learning_rates(lrs)
        self.eps, self.betas = float(eps), (float(betas[0]), float(betas[1]))
        # float64 keeps the bias corrections as exact as the solo step's (Python floats there)
        self.steps = torch.zeros(self.num_members, dtype=torch.float64, device=device)
        self.flat_exp_avg = torch.zeros_like(self.flat)
        self.flat_exp_avg_sq = torch.zeros_like(self.flat)
        self.exp_avg = self._views(self.flat_exp_avg)  # each (M, *param_shape)
        self.exp_avg_sq = self._views(self.flat_exp_avg_sq)

    @property
    def state(self) -> dict:
        """Its tensors, as ``optimizer.state`` holds a torch optimizer's (a captured step's
        key, ``graphs.update_key``)."""
        moments = (self.flat_exp_avg, self.flat_exp_avg_sq, self.steps, self.lrs)
        return {"flat": dict(zip(("exp_avg", "exp_avg_sq", "steps", "lrs"), moments, strict=True))}

    def set_learning_rates(self, lrs) -> None:
        """Member ``k``'s learning rate to ``lrs[k]`` (a schedule's step, per member)."""
        lrs = torch.as_tensor(lrs, dtype=torch.float64).cpu()
        if lrs.shape != (self.num_members,):
            raise ValueError(
                f"learning rates need shape ({self.num_members},), one per member, "
                f"got {tuple(lrs.shape)}"
            )
        if not bool(torch.isfinite(lrs).all() & (lrs >= 0).all()):
            shown = ", ".join(f"{x:g}" for x in lrs.tolist())
            raise ValueError(f"learning rates must be finite and >= 0, got [{shown}]")
        self.lrs.copy_(lrs)

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` (laid out as the parameters) as one view per parameter, of its shape."""
        views, offset = [], 0
        for p in self.params:
            views.append(flat[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
        return views

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the flat buffer every parameter's gradient is a view of (the backward pass adds
        into it in place)."""
        self.flat_grad.zero_()
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g

    @torch.no_grad()
    def clip_(self, max_norm) -> torch.Tensor:
        """Each member's gradient scaled to at most ``max_norm`` (one number, or one per
        member) by its own global 2-norm, as ``clip_grad_norm_`` a solo network's; returns
        the norms, ``(M,)``."""
        parts = [torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in self.grads]
        norms = torch.linalg.vector_norm(torch.stack(parts, dim=1), 2, dim=1)
        clip = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # as clip_grad_norm_: never up
        self.flat_grad.mul_(clip.to(self.flat_grad.dtype)[self.member_of])
        return norms

    @torch.no_grad()
    def step(self, finite: torch.Tensor) -> None:
        """Adam's step with the current gradients for the members where ``finite`` (M,) is
        true; the others' weights, moments and step counts are left as they were."""
        beta1, beta2 = self.betas
        steps = self.steps + finite
        counted = steps.clamp(min=1)  # a member skipped on its first step divides by nothing
        step_size = self.lrs.double() / (1 - beta1**counted)  # (M,)
        bias_correction2_sqrt = (1 - beta2**counted).sqrt()  # (M,)
        p, m, v, dtype = self.flat, self.flat_exp_avg, self.flat_exp_avg_sq, self.flat.dtype
        keep = finite[self.member_of]
        grad = torch.where(keep, self.flat_grad, 0)
        new_m = m.lerp(grad, 1 - beta1)
        new_v = v.mul(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = new_v.sqrt().div_(bias_correction2_sqrt.to(dtype)[self.member_of])
        denom.add_(self.eps)
        size = step_size.to(dtype)[self.member_of]
        new_p = p - size * (new_m / denom)
        p.copy_(torch.where(keep, new_p, p))
        m.copy_(torch.where(keep, new_m, m))
        v.copy_(torch.where(keep, new_v, v))
        self.steps.copy_(steps)

    def member_state(self, k: int, solo) -> dict:
        """Member ``k``'s state as its solo run's ``torch.optim.Adam.state_dict()`` (``solo``:
        an Adam over a member's network, the form's template)."""
        state = solo.state_dict()
        state["param_groups"][0]["lr"] = float(self.lrs[k])
        steps = float(self.steps[k])
        fused = bool(state["param_groups"][0].get("fused"))
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True)):
            if steps == 0:
                break
            step = torch.tensor(steps, dtype=torch.float32)
            state["state"][i] = {
                "step": step.to(m.device) if fused else step,
                "exp_avg": m[k].detach().clone(),
                "exp_avg_sq": v[k].detach().clone(),
            }
        return state

    @torch.no_grad()
    def load_member(self, k: int, state: dict) -> None:
        """Member ``k``'s rate, step count and moments from its solo Adam state (checked by
        ``savedstate.optimizer_state``: each moment of its parameter's shape, finite)."""
        per = state["state"]
        if per and len(per) != len(self.params):
            raise ConfigError("a member's optimizer state holds moments of some weights only")
        self.lrs[k] = float(state["param_groups"][0]["lr"])
        self.steps[k] = float(per[0]["step"]) if per else 0.0
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True)):
            m[k].copy_(per[i]["exp_avg"] if per else 0.0)
            v[k].copy_(per[i]["exp_avg_sq"] if per else 0.0)

"""Optimizers and the one optimizer step every learner takes: Adam or Muon, learning rates a
schedule fills in place, and the step with its NaN guard (skipped where the loss or a gradient
is not finite; on a GPU taken and undone on the device, with no host sync)."""

from __future__ import annotations

import time

import torch

from fasttrain import distributed
from fasttrain.kernels.internals import resolve

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


def optimizer_step(ctx, optimizer, loss, parameters, max_grad_norm: float) -> None:
    """Zero the gradients, backpropagate ``loss``, clip to ``max_grad_norm`` and step;
    skip the step (and count it in ``ctx.skipped``) when the loss or a gradient is not finite.

    ``loss`` may also be an iterable of losses (gradient accumulation): each is
    backpropagated as it comes, so its graph is freed before the next one is built, and
    their gradients add up before the one clip and step.

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
        else:
            piece.backward()
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
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    finite = torch.isfinite(norm) & torch.isfinite(total)
    ctx.updates += 1
    if ctx.scaler is not None:  # GradScaler skips non-finite steps itself
        for part in parts:
            ctx.scaler.step(part)
        ctx.scaler.update()
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

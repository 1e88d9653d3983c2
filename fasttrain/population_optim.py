"""One optimizer step for every member of a ``Population`` at once, each as its solo run's
(issue 53's population runs).

A solo run steps ``torch.optim.Adam`` (``learners.optim.adam``) after ``clip_grad_norm_`` and
skips the step when the loss or a gradient is not finite (``learners.optim.optimizer_step``).
``PopulationAdam`` holds that Adam's state for ``M`` members stacked along the leading member
axis of the population's parameters (``exp_avg``, ``exp_avg_sq``, and a step count per member,
so a skipped member's bias correction does not advance) and one learning rate per member
(``lrs``, shape ``(M,)``, for per-member schedules and hyperparameter variants).
``population_step`` backpropagates the members' summed losses (they share no weights, so each
member's gradient is its own), clips each member's gradient to its own global norm and steps
the members whose loss and gradient are finite while the others keep their weights and state:
all tensor ops over the stacked parameters, no loop over members and no host sync. The
population's parameters are blocks of one flat tensor (``Population.flat``), and so are the
gradients (each parameter's ``.grad`` a view the backward pass adds into) and the moments: the
step is a dozen operations for the whole network, each element reading its member's values
through ``Population.member_of``. Every parameter takes part in each step (a PPO or PQN
network uses all of its weights in every loss); torch's Adam would leave one without a
gradient alone.

``fasttrain run --seeds`` trains with it (``learners/ppo_population.py``,
``learners/pqn_population.py``).
"""

from __future__ import annotations

import torch

from fasttrain.population import Population


class PopulationAdam:
    """Adam (``torch.optim.Adam``'s update, no weight decay, no amsgrad) per member of
    ``population``, with learning rates ``lrs`` (one per member) and shared ``eps`` and
    ``betas``."""

    def __init__(self, population: Population, lrs, eps: float = 1e-5, betas=(0.9, 0.999)):
        self.params = list(population.parameters())
        self.num_members = len(population)
        first = self.params[0]
        # the population's parameters are blocks of one flat tensor: the gradients, moments
        # and step are flat too, one operation for every parameter
        self.flat, self.member_of = population.flat, population.member_of
        self.flat_grad = torch.zeros_like(self.flat)
        self.grads = self._views(self.flat_grad)
        # one rate per member, filled in place by set_learning_rates (float32, as a solo run's
        # rate held as a tensor: see learners.optim.rates_as_tensors)
        self.lrs = torch.zeros(self.num_members, dtype=torch.float32, device=first.device)
        self.set_learning_rates(lrs)
        self.eps = float(eps)
        self.betas = (float(betas[0]), float(betas[1]))
        # Adam counts steps per member; float64 keeps its bias corrections as exact as the
        # solo step's (Python floats there)
        self.steps = torch.zeros(self.num_members, dtype=torch.float64, device=first.device)
        self.flat_exp_avg = torch.zeros_like(self.flat)
        self.flat_exp_avg_sq = torch.zeros_like(self.flat)
        self.exp_avg = self._views(self.flat_exp_avg)  # each (M, *param_shape)
        self.exp_avg_sq = self._views(self.flat_exp_avg_sq)
        self.skipped = torch.zeros(self.num_members, dtype=torch.int64, device=first.device)

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

    def zero_grad(self) -> None:
        """Zero the gradients: the flat buffer every parameter's gradient is a view of (the
        backward pass adds into it in place)."""
        self.flat_grad.zero_()
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g

    @torch.no_grad()
    def step(self, finite: torch.Tensor) -> None:
        """Adam's step with the current gradients for the members where ``finite`` (M,) is
        true; the others' weights, moments and step counts are left as they were. Every
        parameter at once, over the flat tensors, each element with its member's values."""
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

    def state_dict(self) -> dict:
        """Copies of the learning rates, step counts, moments and skip counts."""
        return {
            "lrs": self.lrs.clone(),
            "steps": self.steps.clone(),
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
            "skipped": self.skipped.clone(),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Take back what ``state_dict`` gave (the same population's shapes)."""
        mine = self.state_dict()
        if not isinstance(state, dict) or set(state) != set(mine):
            raise ValueError("the optimizer state is not a population Adam's")
        for key, want in mine.items():
            if _shapes(state[key]) != _shapes(want):
                raise ValueError(f"the optimizer state's {key} does not fit this population")
        self.set_learning_rates(state["lrs"])
        self.steps.copy_(state["steps"])
        self.skipped.copy_(state["skipped"])
        for own, theirs in zip(
            self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"], strict=True
        ):
            own.copy_(theirs)


def _shapes(value):
    """The shape of a tensor, the shapes of a list of tensors, else None."""
    if torch.is_tensor(value):
        return tuple(value.shape)
    if isinstance(value, list) and all(torch.is_tensor(t) for t in value):
        return [tuple(t.shape) for t in value]
    return None


def member_grad_norms(optimizer: PopulationAdam) -> torch.Tensor:
    """Each member's global 2-norm over its slices of every gradient, (M,): the norm
    ``clip_grad_norm_`` takes of a solo network's gradients."""
    norms = [torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in optimizer.grads]  # (M,)
    return torch.linalg.vector_norm(torch.stack(norms, dim=1), 2, dim=1)


def population_step(optimizer: PopulationAdam, losses: torch.Tensor, max_grad_norm) -> torch.Tensor:
    """Zero the gradients, backpropagate ``losses`` (M,) summed, clip each member's gradient
    to ``max_grad_norm`` (one float, or one per member, (M,)) by its own norm and step; a
    member whose loss or gradient is not finite is skipped alone (its weights and state
    unchanged, counted in ``optimizer.skipped``). Returns which members stepped, (M,) bool."""
    if losses.shape != (optimizer.num_members,):
        raise ValueError(
            f"losses need shape ({optimizer.num_members},), one per member, "
            f"got {tuple(losses.shape)}"
        )
    optimizer.zero_grad()
    losses.sum().backward()  # d(sum)/d(loss_k) = 1: member k's gradient is its loss's own
    norms = member_grad_norms(optimizer)
    finite = torch.isfinite(norms) & torch.isfinite(losses.detach())
    # as clip_grad_norm_: scale by max_norm / (norm + 1e-6), never up
    clip = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    with torch.no_grad():
        grad = optimizer.flat_grad
        grad.mul_(clip.to(grad.dtype)[optimizer.member_of])
    optimizer.step(finite)
    optimizer.skipped += ~finite
    return finite

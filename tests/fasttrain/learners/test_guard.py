"""The NaN/inf guard of ``RunContext.optimizer_step``: a non-finite loss or gradient skips the
step and leaves weights and optimizer state as they were, on the host path and the masked
(device, no host sync) path alike."""

from __future__ import annotations

import copy

import pytest
import torch

from fasttrain.device import resolve_device
from fasttrain.learners.common import RunContext


def context(masked: bool) -> RunContext:
    device = resolve_device("cpu")
    ctx = RunContext(device, torch.Generator().manual_seed(0), None, None, None)
    ctx.masked_steps = masked
    return ctx


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-5)


def loss_of(model, poison: float | None = None):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    loss = model(x).pow(2).mean()
    return loss * poison if poison is not None else loss


def snapshot(model, optimizer):
    return copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())


def assert_same(a, b):
    (weights_a, optim_a), (weights_b, optim_b) = a, b
    for key in weights_a:
        assert torch.equal(weights_a[key], weights_b[key]), key
    for index, state in optim_a["state"].items():
        for key, value in state.items():
            assert torch.equal(value, optim_b["state"][index][key]), (index, key)


@pytest.mark.parametrize("masked", [False, True], ids=["host", "masked"])
def test_a_finite_step_equals_a_plain_optimizer_step(masked):
    model, optimizer = model_and_optimizer()
    plain_model, plain_optimizer = model_and_optimizer()
    ctx = context(masked)
    for _ in range(3):
        ctx.optimizer_step(optimizer, loss_of(model), model.parameters(), 0.5)
        plain_optimizer.zero_grad(set_to_none=True)
        loss_of(plain_model).backward()
        torch.nn.utils.clip_grad_norm_(plain_model.parameters(), 0.5)
        plain_optimizer.step()
    assert_same(snapshot(model, optimizer), snapshot(plain_model, plain_optimizer))
    assert int(ctx.take_skipped()) == 0 and ctx.updates == 3


@pytest.mark.parametrize("masked", [False, True], ids=["host", "masked"])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
@pytest.mark.parametrize("first", [True, False], ids=["first-step", "later-step"])
def test_a_non_finite_step_changes_nothing_and_is_counted(masked, poison, first):
    model, optimizer = model_and_optimizer()
    ctx = context(masked)
    if not first:  # the optimizer already holds moments to keep
        ctx.optimizer_step(optimizer, loss_of(model), model.parameters(), 0.5)
    before = snapshot(model, optimizer)
    ctx.optimizer_step(optimizer, loss_of(model, poison), model.parameters(), 0.5)
    weights, _ = snapshot(model, optimizer)
    for key, value in before[0].items():
        assert torch.equal(weights[key], value), key
    for state in optimizer.state.values():  # no moment took a NaN in
        for key, value in state.items():
            if key != "step":
                assert torch.isfinite(value).all(), key
    if not first and not masked:  # the host path skips the step outright, counters included
        assert_same(before, snapshot(model, optimizer))
    assert int(ctx.take_skipped()) == 1 and int(ctx.take_skipped()) == 0
    # and training goes on from there
    ctx.optimizer_step(optimizer, loss_of(model), model.parameters(), 0.5)
    assert all(torch.isfinite(p).all() for p in model.parameters())

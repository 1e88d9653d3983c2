"""Optimizers and the optimizer step of ``learners/optim.py``: the NaN/inf guard of
``RunContext.optimizer_step`` (a non-finite loss or gradient skips the step and leaves weights
and optimizer state as they were, on the host path and the masked (device, no host sync) path
alike), Adam and Muon."""

from __future__ import annotations

import copy

import pytest
import torch

from fasttrain import config as cfg
from fasttrain.device import resolve_device
from fasttrain.learners.base import RunContext
from fasttrain.learners.optim import Optimizers, make_optimizer, set_learning_rate
from fasttrain.models import make_policy
from fasttrain.runner import run
from tests.conftest import small_snake as small


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


# ------------------------------------------------------------------ optimizers


def test_muon_steps_hidden_matrices_and_adam_the_rest():
    policy = make_policy((4, 6, 6), torch.uint8, 4, cfg.ModelConfig(hidden=16))
    optimizer = make_optimizer("muon", policy, 1e-3)
    assert isinstance(optimizer, Optimizers)
    muon, adam = optimizer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adam, torch.optim.Adam)
    muon_params = {id(p) for g in muon.param_groups for p in g["params"]}
    for name, p in policy.named_parameters():
        expected = name.startswith("torso.") and p.ndim == 2
        assert (id(p) in muon_params) is expected, name
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(policy.parameters()))
    # one step changes every parameter; the state dict round-trips into a fresh optimizer
    obs = torch.randint(0, 2, (8, 4, 6, 6), dtype=torch.uint8)
    logits, values, _ = policy(obs)
    (logits.square().mean() + values.square().mean()).backward()
    before = [p.detach().clone() for p in policy.parameters()]
    optimizer.step()
    assert all(not torch.equal(p, b) for p, b in zip(policy.parameters(), before, strict=True))
    fresh = make_optimizer("muon", policy, 1e-3)
    fresh.load_state_dict(optimizer.state_dict())
    assert set(map(id, fresh.state)) == set(map(id, optimizer.state))
    # the rates are tensors a schedule fills in place (a float would recompile each iteration)
    rate = fresh.param_groups[0]["lr"]
    assert all(torch.is_tensor(g["lr"]) for g in fresh.param_groups)
    set_learning_rate(fresh, 5e-4)
    assert fresh.param_groups[0]["lr"] is rate
    assert all(float(g["lr"]) == pytest.approx(5e-4) for g in fresh.param_groups)
    with pytest.raises(ValueError):
        fresh.load_state_dict(make_optimizer("adam", policy, 1e-3).state_dict())


def test_adam_and_muon_checkpoints_do_not_mix(tmp_path):
    config = small(game={"snake": {"ppo": {"total_timesteps": 256}}})
    run(config, out=tmp_path / "adam", echo=lambda *_: None)
    muon = small(game={"snake": {"ppo": {"total_timesteps": 512, "optimizer": "muon"}}})
    with pytest.raises(cfg.ConfigError, match="optimizer"):
        run(muon, resume=tmp_path / "adam", echo=lambda *_: None)


def test_unknown_optimizer_is_one_line():
    with pytest.raises(cfg.ConfigError, match="adam, muon"):
        small(ppo={"optimizer": "sgd"})


@pytest.mark.slow
def test_muon_trains_cartpole(tmp_path):
    """PPO with optimizer = "muon" and the cartpole defaults reaches a mean return of 400."""
    config = cfg.from_dict(
        {
            "game": {"name": "cartpole", "cartpole": {"ppo": {"optimizer": "muon"}}},
            "log": {"progress": False},
        }
    )
    summary = run(config, out=tmp_path / "muon", echo=lambda *_: None)
    assert summary["episodic_return"] >= 400, summary

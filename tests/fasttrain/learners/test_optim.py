"""Optimizers and the optimizer step of ``learners/optim.py``: the NaN/inf guard of
``RunContext.optimizer_step`` (a non-finite loss or gradient skips the step and leaves weights
and optimizer state as they were, on the host path and the masked (device, no host sync) path
alike), Adam and Muon."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.device import resolve_device
from fasttrain.errors import ConfigError
from fasttrain.learners.context import RunContext
from fasttrain.learners.optim import (
    Optimizers,
    PopulationAdam,
    adam,
    make_optimizer,
    optimizer_step,
    set_learning_rate,
)
from fasttrain.learners.population import Population, build_members
from fasttrain.models import make_policy
from fasttrain.run.runner import run
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


# ------------------------------------------------------------------ A POPULATION'S ADAM

POP_SEEDS = (0, 1, 2)
POP_LRS = (1e-3, 3e-3, 3e-4)
POP_EPS = 1e-5  # the solo PPO and PQN runs' (learners.optim.make_optimizer)
MAX_GRAD_NORM = 6.0  # member 0's gradients are over it, member 2's under, member 1's both
# float rounding: batched against solo matrix products, and the solo run's fused Adam kernel
# against these tensor ops, over a few steps (bit equality is not promised)
TIGHT = {"rtol": 1e-5, "atol": 1e-6}
SCALES = torch.tensor([4.0, 0.05, 1.0])


def snake_observations(step: int, members: int = len(POP_SEEDS)) -> torch.Tensor:
    """Random 6x6 snake observations ``(M, 6, 4, 6, 6)``, a different batch each step."""
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randint(0, 3, (members, 6, 4, 6, 6), generator=gen, dtype=torch.uint8)


def member_losses(logits, values, scale):
    """A policy term and a value term per member (the leading axes are kept)."""
    return -logits.log_softmax(-1)[..., 0].mean(-1) * scale + ((values - 1.0) ** 2).mean(-1)


def step_context(members: int) -> SimpleNamespace:
    """What ``optimizer_step`` reads of a run's context, for a population of ``members``."""
    no_ranks = SimpleNamespace(enabled=False)
    skipped = torch.zeros(members, dtype=torch.int64)
    cpu = torch.device("cpu")
    return SimpleNamespace(
        scaler=None, ranks=no_ranks, device=cpu, masked_steps=False, updates=0, skipped=skipped
    )


class SoloMember:
    """A member's solo network stepped as ``optimizer_step`` steps a solo run's."""

    def __init__(self, net, lr):
        self.net = net
        self.optimizer = adam(net.parameters(), lr, POP_EPS)
        self.ctx = step_context(1)
        self.ctx.skipped = torch.zeros((), dtype=torch.int64)

    def step(self, obs, scale, poison=None) -> None:
        logits, values, _ = self.net(obs)
        loss = member_losses(logits, values, scale)
        if poison is not None:
            loss = poison(self.net.actor.bias, loss)
        optimizer_step(self.ctx, self.optimizer, loss, self.net.parameters(), MAX_GRAD_NORM)


def make_net():
    """A member's network: a Snake MLP of ``build_members``' seed (it seeds torch first)."""
    return make_policy((4, 6, 6), np.uint8, 4, cfg.ModelConfig(kind="mlp", hidden=16))


def population_setup(lrs=POP_LRS, seeds=POP_SEEDS):
    population = Population(build_members(make_net, seeds))
    optimizer = PopulationAdam(population, lrs, eps=POP_EPS)
    solos = [
        SoloMember(net, lr) for net, lr in zip(build_members(make_net, seeds), lrs, strict=True)
    ]
    return population, optimizer, solos, step_context(len(seeds))


def assert_member_is_solo(population, k, solo) -> None:
    got = population.member_state_dict(k)
    for name, want in solo.net.state_dict().items():
        torch.testing.assert_close(got[name], want, **TIGHT, msg=f"member {k}: {name}")


def test_each_member_steps_as_its_solo_adam_with_its_own_rate_and_clip():
    population, optimizer, solos, ctx = population_setup()
    clipped = set()
    for step in range(4):
        obs = snake_observations(step)
        logits, values, _ = population(obs)
        losses = member_losses(logits, values, SCALES)
        optimizer_step(ctx, optimizer, losses, population.parameters(), MAX_GRAD_NORM)
        grads = {n: p.grad for n, p in population.stacked.named_parameters()}
        for k, solo in enumerate(solos):
            solo.step(obs[k], SCALES[k])
            norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in solo.net.parameters()])
            )
            clipped |= {k} if norm >= MAX_GRAD_NORM * (1 - 1e-4) else set()
            for n, p in solo.net.named_parameters():  # the gradient clipped by its own norm
                torch.testing.assert_close(grads[n][k], p.grad, **TIGHT)
            assert_member_is_solo(population, k, solo)
    assert clipped and clipped != set(range(len(POP_SEEDS)))  # the clip was tested both ways
    assert optimizer.steps.tolist() == [4.0] * len(POP_SEEDS)
    assert ctx.skipped.tolist() == [0] * len(POP_SEEDS) and ctx.updates == 4


def nan_loss(bias, loss):
    """``loss`` made NaN."""
    return loss * float("nan")


def nan_gradient(bias, loss):
    """``loss`` unchanged in value, with a NaN gradient at ``bias[0]`` (sqrt's slope at 0 is
    infinite)."""
    return loss + (bias[0] * 0).abs().sqrt()


@pytest.mark.parametrize("poison", [nan_loss, nan_gradient])
def test_a_non_finite_member_is_skipped_alone(poison):
    population, optimizer, solos, ctx = population_setup()
    bad = 1
    for step in range(3):
        obs = snake_observations(step)
        poisoned = step in (0, 2)  # on its first step (no state yet) and after one taken
        logits, values, _ = population(obs)
        losses = member_losses(logits, values, SCALES)
        weights = population.member_state_dict(bad)
        moments = [t[bad].clone() for t in optimizer.exp_avg + optimizer.exp_avg_sq]
        steps = float(optimizer.steps[bad])
        if poisoned:  # member `bad`'s loss alone, as its solo run's below
            bias = population.stacked.get_parameter("actor.bias")[bad]
            parts = list(losses.unbind())
            parts[bad] = poison(bias, parts[bad])
            losses = torch.stack(parts)
        optimizer_step(ctx, optimizer, losses, population.parameters(), MAX_GRAD_NORM)
        for k, solo in enumerate(solos):
            solo.step(obs[k], SCALES[k], poison if poisoned and k == bad else None)
            assert_member_is_solo(population, k, solo)
        if poisoned:  # its weights and Adam state exactly as they were
            for name, tensor in population.member_state_dict(bad).items():
                assert torch.equal(tensor, weights[name]), name
            now = [t[bad] for t in optimizer.exp_avg + optimizer.exp_avg_sq]
            assert all(torch.equal(a, b) for a, b in zip(moments, now, strict=True))
            assert float(optimizer.steps[bad]) == steps
    assert optimizer.steps.tolist() == [3.0, 1.0, 3.0]
    assert ctx.skipped.tolist() == [0, 2, 0]
    assert int(solos[bad].ctx.skipped) == 2  # the solo run skipped the same two


def test_members_get_the_rates_set_and_equal_members_stay_identical():
    lrs = (1e-3, 3e-4, 1e-3)
    population, optimizer, _, ctx = population_setup(lrs=lrs, seeds=(4, 5, 4))
    assert torch.equal(optimizer.lrs, torch.tensor(lrs, dtype=torch.float32))
    for step in range(3):
        obs = snake_observations(step)
        obs[2] = obs[0]  # members 0 and 2: the same seed, rate and data
        logits, values, _ = population(obs)
        losses = member_losses(logits, values, 1.0)
        optimizer_step(ctx, optimizer, losses, population.parameters(), MAX_GRAD_NORM)
        if step == 1:  # a schedule's step, per member
            lrs = (5e-4, 1e-4, 5e-4)
            optimizer.set_learning_rates(lrs)
    assert torch.equal(optimizer.lrs, torch.tensor(lrs, dtype=torch.float32))
    first, other, same = (population.member_state_dict(k) for k in range(3))
    for name in first:
        assert torch.equal(first[name], same[name]), name
    assert not torch.equal(first["actor.weight"], other["actor.weight"])
    for moments in (optimizer.exp_avg, optimizer.exp_avg_sq):
        assert all(torch.equal(t[0], t[2]) for t in moments)


def test_a_members_state_round_trips_through_a_solo_adams_form():
    """Member k's rate, step count and moments as its solo run's torch Adam state (what its
    checkpoint holds: a solo Adam loads it and steps on as the member does) and back into
    another population's member k; a member that took no step yet holds no moments."""
    population, optimizer, solos, ctx = population_setup()
    template = adam(build_members(make_net, (0,))[0].parameters(), 1.0, POP_EPS)
    assert optimizer.member_state(1, template)["state"] == {}
    logits, values, _ = population(snake_observations(0))
    optimizer_step(
        ctx,
        optimizer,
        member_losses(logits, values, SCALES),
        population.parameters(),
        MAX_GRAD_NORM,
    )
    state = optimizer.member_state(1, template)
    assert state["param_groups"][0]["lr"] == pytest.approx(POP_LRS[1])
    solo = solos[1]
    solo.net.load_state_dict(population.member_state_dict(1))
    solo.optimizer.load_state_dict(state)
    fresh = Population(build_members(make_net, POP_SEEDS))
    other = PopulationAdam(fresh, (0.0, 0.0, 0.0), eps=POP_EPS)
    other.load_member(1, optimizer.member_state(1, template))
    assert float(other.lrs[1]) == pytest.approx(POP_LRS[1]) and other.steps.tolist() == [0, 1, 0]
    for mine, theirs in zip(
        other.exp_avg + other.exp_avg_sq, optimizer.exp_avg + optimizer.exp_avg_sq, strict=True
    ):
        assert torch.equal(mine[1], theirs[1]) and not mine[0].any()
    fresh.load_member(1, population.member_state_dict(1))
    obs = snake_observations(1)
    logits, values, _ = fresh(obs)
    optimizer_step(
        step_context(3),
        other,
        member_losses(logits, values, SCALES),
        fresh.parameters(),
        MAX_GRAD_NORM,
    )
    solo.step(obs[1], SCALES[1])
    assert_member_is_solo(fresh, 1, solo)
    partial = optimizer.member_state(1, template)
    del partial["state"][0]
    with pytest.raises(ConfigError, match="moments of some weights only"):
        other.load_member(1, partial)


def test_bad_rates_are_refused_in_one_line():
    _, optimizer, _, _ = population_setup()
    with pytest.raises(ValueError, match=r"learning rates need shape \(3,\), one per member"):
        optimizer.set_learning_rates((1e-3, 1e-3))
    with pytest.raises(ValueError, match=r"finite and >= 0, got \[0.001, -1, nan\]"):
        optimizer.set_learning_rates((1e-3, -1.0, float("nan")))

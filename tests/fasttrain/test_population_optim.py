"""fasttrain.population_optim: each member of a population steps as its solo network under the
solo run's Adam, clip and NaN guard, with its own learning rate; a non-finite member is skipped
alone."""

from __future__ import annotations

import pytest
import torch

from fasttrain import games
from fasttrain.learners.optim import adam
from fasttrain.population import Population, build_members
from fasttrain.population_optim import PopulationAdam, population_step
from tests.conftest import small_snake

SEEDS = (0, 1, 2)
LRS = (1e-3, 3e-3, 3e-4)
EPS = 1e-5  # the solo PPO and PQN runs' (learners.optim.make_optimizer)
MAX_GRAD_NORM = 6.0  # member 0's gradients are over it, member 2's under, member 1's both
# float rounding: batched against solo matrix products, and the solo run's fused Adam kernel
# against these tensor ops, over a few steps (bit equality is not promised)
TIGHT = {"rtol": 1e-5, "atol": 1e-6}
ROWS = 6


def observations(config, step: int, members: int = len(SEEDS)) -> torch.Tensor:
    """Random snake observations ``(M, ROWS, *obs_shape)``, a different batch each step."""
    shape = tuple(games.get("snake").obs_shape(config.params))
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randint(0, 3, (members, ROWS, *shape), generator=gen, dtype=torch.uint8)


def loss_of(logits, values, scale):
    """A policy term and a value term per member (the leading axes are kept)."""
    return -logits.log_softmax(-1)[..., 0].mean(-1) * scale + ((values - 1.0) ** 2).mean(-1)


class Solo:
    """A member's solo network stepped as ``learners.optim.optimizer_step`` steps it."""

    def __init__(self, net, lr):
        self.net = net
        self.optimizer = adam(net.parameters(), lr, EPS)

    def step(self, obs, scale, poison=None) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        logits, values, _ = self.net(obs)
        loss = loss_of(logits, values, scale)
        if poison is not None:
            loss = poison(self.net.actor.bias, loss)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(self.net.parameters()), MAX_GRAD_NORM)
        if bool(torch.isfinite(norm) & torch.isfinite(loss)):
            self.optimizer.step()
        return norm


def setup(lrs=LRS, seeds=SEEDS):
    config = small_snake(run={"device": "cpu"})
    population = Population(build_members(config, seeds))
    optimizer = PopulationAdam(population, lrs, eps=EPS)
    solos = [Solo(net, lr) for net, lr in zip(build_members(config, seeds), lrs, strict=True)]
    return config, population, optimizer, solos


def assert_member_is_solo(population, k, solo) -> None:
    got = population.member_state_dict(k)
    for name, want in solo.net.state_dict().items():
        torch.testing.assert_close(got[name], want, **TIGHT, msg=f"member {k}: {name}")


SCALES = torch.tensor([4.0, 0.05, 1.0])


def test_each_member_steps_as_its_solo_adam_with_its_own_rate_and_clip():
    config, population, optimizer, solos = setup()
    clipped = set()
    for step in range(4):
        obs = observations(config, step)
        logits, values, _ = population(obs)
        stepped = population_step(optimizer, loss_of(logits, values, SCALES), MAX_GRAD_NORM)
        assert stepped.tolist() == [True] * len(SEEDS)
        grads = {n: p.grad for n, p in population.stacked.named_parameters()}
        for k, solo in enumerate(solos):
            norm = solo.step(obs[k], SCALES[k])
            if norm > MAX_GRAD_NORM:
                clipped.add(k)
            for n, p in solo.net.named_parameters():  # the gradient clipped by its own norm
                torch.testing.assert_close(grads[n][k], p.grad, **TIGHT)
            assert_member_is_solo(population, k, solo)
    assert clipped and clipped != set(range(len(SEEDS)))  # the clip was tested both ways
    assert optimizer.steps.tolist() == [4.0] * len(SEEDS)
    assert optimizer.skipped.tolist() == [0] * len(SEEDS)


def nan_loss(bias, loss):
    """``loss`` made NaN."""
    return loss * float("nan")


def nan_gradient(bias, loss):
    """``loss`` unchanged in value, with a NaN gradient at ``bias[0]`` (sqrt's slope at 0 is
    infinite)."""
    return loss + (bias[0] * 0).abs().sqrt()


@pytest.mark.parametrize("poison", [nan_loss, nan_gradient])
def test_a_non_finite_member_is_skipped_alone(poison):
    config, population, optimizer, solos = setup()
    bad = 1
    for step in range(3):
        obs = observations(config, step)
        poisoned = step in (0, 2)  # on its first step (no state yet) and after one taken
        logits, values, _ = population(obs)
        losses = loss_of(logits, values, SCALES)
        before = (population.member_state_dict(bad), optimizer.state_dict())
        if poisoned:  # member `bad`'s loss alone, as its solo run's below
            bias = population.stacked.get_parameter("actor.bias")[bad]
            parts = list(losses.unbind())
            parts[bad] = poison(bias, parts[bad])
            losses = torch.stack(parts)
        stepped = population_step(optimizer, losses, MAX_GRAD_NORM)
        assert stepped.tolist() == [True, not poisoned, True]
        for k, solo in enumerate(solos):
            chosen = poison if poisoned and k == bad else None
            solo.step(obs[k], SCALES[k], chosen)
            assert_member_is_solo(population, k, solo)
        if poisoned:  # its weights and Adam state exactly as they were
            weights, state = before
            for name, tensor in population.member_state_dict(bad).items():
                assert torch.equal(tensor, weights[name]), name
            after = optimizer.state_dict()
            for key in ("exp_avg", "exp_avg_sq"):
                for old, new in zip(state[key], after[key], strict=True):
                    assert torch.equal(old[bad], new[bad])
            assert after["steps"][bad] == state["steps"][bad]
    assert optimizer.steps.tolist() == [3.0, 1.0, 3.0]
    assert optimizer.skipped.tolist() == [0, 2, 0]


def test_members_get_the_rates_set_and_equal_members_stay_identical():
    lrs = (1e-3, 3e-4, 1e-3)
    config, population, optimizer, _ = setup(lrs=lrs, seeds=(4, 5, 4))
    assert torch.equal(optimizer.lrs, torch.tensor(lrs, dtype=torch.float32))
    for step in range(3):
        obs = observations(config, step)
        obs[2] = obs[0]  # members 0 and 2: the same seed, rate and data
        logits, values, _ = population(obs)
        population_step(optimizer, loss_of(logits, values, 1.0), MAX_GRAD_NORM)
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


def test_the_state_round_trips_and_bad_settings_are_refused_in_one_line():
    config, population, optimizer, _ = setup()
    logits, values, _ = population(observations(config, 0))
    population_step(optimizer, loss_of(logits, values, SCALES), MAX_GRAD_NORM)
    state = optimizer.state_dict()
    fresh = PopulationAdam(population, (0.0, 0.0, 0.0), eps=EPS)
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        want = state[key]
        assert (
            all(map(torch.equal, value, want))
            if isinstance(want, list)
            else torch.equal(value, want)
        ), key
    with pytest.raises(
        ValueError, match=r"learning rates need shape \(3,\), one per member, got \(2,\)"
    ):
        optimizer.set_learning_rates((1e-3, 1e-3))
    with pytest.raises(ValueError, match=r"finite and >= 0, got \[0.001, -1, nan\]"):
        optimizer.set_learning_rates((1e-3, -1.0, float("nan")))
    with pytest.raises(ValueError, match=r"losses need shape \(3,\), one per member, got \(\)"):
        population_step(optimizer, torch.zeros(()), MAX_GRAD_NORM)
    state["exp_avg"] = state["exp_avg"][:-1]
    with pytest.raises(ValueError, match="the optimizer state's exp_avg does not fit"):
        fresh.load_state_dict(state)

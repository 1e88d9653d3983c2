"""fasttrain.population: members built as their solo runs, one batched forward and backward that
equal each member's own, and member weights in and out as solo state dicts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fasttrain import config as cfg
from fasttrain.learners import LEARNERS
from fasttrain.models import make_policy, make_q_network
from fasttrain.population import Population, build_members
from tests.conftest import small_snake

SEEDS = (0, 1, 2)
# float rounding of a batched matrix product against the solo one (bit equality is not promised)
TIGHT = {"rtol": 1e-5, "atol": 1e-6}

# (obs_shape, obs_dtype, categories, model): cartpole's vector, snake's uint8 grid through the
# MLP and the CNN, the arena's category codes (one-hot) through the CNN
NETWORKS = {
    "cartpole-mlp": ((4,), np.float32, 0, cfg.ModelConfig(kind="mlp", hidden=16)),
    "snake-mlp": ((4, 6, 6), np.uint8, 0, cfg.ModelConfig(kind="mlp", hidden=16)),
    "snake-cnn": ((4, 6, 6), np.uint8, 0, cfg.ModelConfig(kind="cnn", hidden=16, channels=4)),
    "arena-cnn": ((7, 7), np.uint8, 6, cfg.ModelConfig(kind="cnn", hidden=16, channels=4)),
    "gru": ((4,), np.float32, 0, cfg.ModelConfig(hidden=16, core="gru", core_size=8)),
    "lstm": ((4,), np.float32, 0, cfg.ModelConfig(hidden=16, core="lstm", core_size=8)),
}


def quiet(*_):
    pass


def members(name: str, q: bool = False) -> list[torch.nn.Module]:
    shape, dtype, categories, model = NETWORKS[name]
    torch.manual_seed(7)
    if q:
        return [
            make_q_network(shape, dtype, 3, model, obs_categories=categories, layer_norm=True)
            for _ in SEEDS
        ]
    return [make_policy(shape, dtype, 3, model, obs_categories=categories) for _ in SEEDS]


def observations(name: str, rows: int = 5) -> torch.Tensor:
    """Random observations ``(M, rows, *obs_shape)`` of the network ``name``'s game."""
    shape, dtype, categories, _ = NETWORKS[name]
    gen = torch.Generator().manual_seed(3)
    size = (len(SEEDS), rows, *shape)
    if categories:
        return torch.randint(0, categories, size, generator=gen, dtype=torch.uint8)
    if dtype == np.uint8:
        return torch.randint(0, 3, size, generator=gen, dtype=torch.uint8)
    return torch.randn(size, generator=gen)


def assert_same_weights(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_each_member_starts_from_its_solo_runs_weights_bit_for_bit(algo):
    config = small_snake(run={"algo": algo, "device": "cpu"})
    built = build_members(config, SEEDS)
    for k in (0, 2):  # two seeds: the first and one the solo run reaches by its own seeding
        trainer = LEARNERS[algo].trainer(small_snake(run={"algo": algo, "seed": SEEDS[k]}), quiet)
        solo = trainer.policy if algo == "ppo" else trainer.q_network
        assert_same_weights(built[k].state_dict(), solo.state_dict())
    assert not torch.equal(*(m.state_dict()["torso.1.weight"] for m in built[:2]))


def test_building_members_leaves_the_callers_random_stream_alone():
    torch.manual_seed(5)
    want = torch.rand(3)
    torch.manual_seed(5)
    build_members(small_snake(), SEEDS)
    assert torch.equal(torch.rand(3), want)


def test_a_learner_without_one_network_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"run.algo in \(ppo, pqn\), got 'dqn'"):
        build_members(small_snake(run={"algo": "dqn"}), SEEDS)


@pytest.mark.parametrize("name", ["cartpole-mlp", "snake-mlp", "snake-cnn", "arena-cnn"])
def test_the_batched_forward_is_each_members_own(name):
    nets = members(name)
    obs = observations(name)
    logits, values, state = Population(nets)(obs)
    assert state is None
    assert logits.shape == (len(SEEDS), 5, 3) and values.shape == (len(SEEDS), 5)
    for k, net in enumerate(nets):
        solo_logits, solo_values, _ = net(obs[k])
        torch.testing.assert_close(logits[k], solo_logits, **TIGHT)
        torch.testing.assert_close(values[k], solo_values, **TIGHT)


def test_the_batched_q_network_with_layer_norm_is_each_members_own():
    nets = members("snake-cnn", q=True)
    obs = observations("snake-cnn")
    q = Population(nets)(obs)
    for k, net in enumerate(nets):
        torch.testing.assert_close(q[k], net(obs[k]), **TIGHT)


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_recurrent_members_step_and_unroll_as_their_own(core):
    nets = members(core)
    population = Population(nets)
    obs = observations(core, rows=4)  # (M, 4, 4): 4 rows
    state = torch.randn(len(SEEDS), 4, nets[0].state_size)
    starts = torch.tensor([True, False, False, True]).expand(len(SEEDS), 4)
    logits, values, next_state = population(obs, state, starts)
    # unroll: (M, H=2, rows=2, ...) sequences from (M, 2, state_size) states
    seq_obs, seq_starts = obs.reshape(len(SEEDS), 2, 2, 4), starts.reshape(len(SEEDS), 2, 2)
    seq_logits, seq_values = population.call("unroll", seq_obs, state[:, :2], seq_starts)
    for k, net in enumerate(nets):
        want = net(obs[k], state[k], starts[k])
        for got, solo in zip((logits[k], values[k], next_state[k]), want, strict=True):
            torch.testing.assert_close(got, solo, **TIGHT)
        solo_logits, solo_values = net.unroll(seq_obs[k], state[k, :2], seq_starts[k])
        torch.testing.assert_close(seq_logits[k], solo_logits, **TIGHT)
        torch.testing.assert_close(seq_values[k], solo_values, **TIGHT)


@pytest.mark.parametrize("name", ["cartpole-mlp", "snake-mlp"])
def test_an_mlp_runs_as_batched_products_with_vmaps_numbers(name):
    """An MLP actor-critic takes the batched-product path (no vmap: its per-call cost was most
    of a small network's step), with the numbers the generic vmap path gives; other networks
    keep vmap."""
    population = Population(members(name))
    assert population._plan is not None
    obs = observations(name)
    fast = population(obs)
    generic = population.call("forward", obs)
    for a, b in zip(fast[:2], generic[:2], strict=True):
        torch.testing.assert_close(a, b, **TIGHT)
    assert Population(members("snake-cnn"))._plan is None
    assert Population(members("gru"))._plan is None


@pytest.mark.parametrize("name", ["cartpole-mlp", "snake-mlp"])
def test_an_mlp_q_network_with_layer_norm_runs_as_batched_products_with_vmaps_numbers(
    name, monkeypatch
):
    """PQN's Q-network (an MLP with LayerNorm) takes the batched-product path too, whole or
    member by member, with the numbers vmap gives and gradients to every member's slice."""
    from fasttrain import population as module

    population = Population(members(name, q=True))
    assert population._plan is not None and any(s[0] == "norm" for s in population._plan)
    obs = observations(name)
    with torch.no_grad():  # LayerNorm affine weights away from their 1 and 0 starts
        for p in population.stacked.parameters():
            p.add_(0.1 * torch.randn_like(p))
    generic = population.call("forward", obs)
    torch.testing.assert_close(population(obs), generic, **TIGHT)
    monkeypatch.setattr(module, "MEMBER_CHUNK_BYTES", 1)
    apart = population(obs)
    torch.testing.assert_close(apart, generic, **TIGHT)
    apart.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in population.stacked.parameters())  # fmt: skip
    dueling = [make_q_network((4,), np.float32, 3, NETWORKS["cartpole-mlp"][3], dueling=True)]
    assert Population(dueling)._plan is None


def test_a_large_input_runs_member_by_member_with_the_same_numbers(monkeypatch):
    from fasttrain import population as module

    population = Population(members("snake-mlp"))
    obs = observations("snake-mlp")
    together = population(obs)
    monkeypatch.setattr(module, "MEMBER_CHUNK_BYTES", 1)  # every input is "large"
    apart = population(obs)
    for a, b in zip(together[:2], apart[:2], strict=True):
        torch.testing.assert_close(a, b, **TIGHT)
    (apart[0].sum() + apart[1].sum()).backward()  # gradients reach each member's slice
    assert all(p.grad is not None for p in population.stacked.parameters())


@pytest.mark.parametrize("name", ["snake-cnn", "gru", "snake-mlp", "cartpole-mlp"])
def test_the_summed_loss_gives_each_member_its_solo_gradient(name):
    nets = members(name)
    population = Population(nets)
    obs = observations(name)
    target = torch.randn(len(SEEDS), 5)

    def loss(logits, values, target):  # a policy term and a value term, per member
        return logits.log_softmax(-1)[..., 0].mean(-1) + ((values - target) ** 2).mean(-1)

    logits, values, _ = population(obs)
    loss(logits, values, target).sum().backward()
    grads = {n: p.grad for n, p in population.stacked.named_parameters()}
    assert set(grads) == {n for n, _ in nets[0].named_parameters()}
    for k, net in enumerate(nets):
        solo_logits, solo_values, _ = net(obs[k])
        loss(solo_logits, solo_values, target[k]).backward()
        for n, p in net.named_parameters():
            torch.testing.assert_close(grads[n][k], p.grad, **TIGHT)


def test_the_population_parameters_are_what_an_optimizer_takes():
    population = Population(members("cartpole-mlp"))
    params = list(population.parameters())
    assert len(params) == len(list(members("cartpole-mlp")[0].parameters()))
    assert all(p.is_leaf and p.requires_grad and p.shape[0] == len(SEEDS) for p in params)
    before = population.member_state_dict(1)
    optimizer = torch.optim.SGD(population.parameters(), lr=0.1)
    population(observations("cartpole-mlp"))[0].sum().backward()  # the logits: actor.weight
    optimizer.step()
    after = population.member_state_dict(1)
    assert not torch.equal(before["actor.weight"], after["actor.weight"])


@pytest.mark.parametrize("name", ["snake-cnn", "lstm"])
def test_a_members_weights_round_trip_through_a_solo_network(name):
    nets = members(name)
    population = Population(nets)
    obs = observations(name)
    with torch.no_grad():  # move member 1 away from its initial weights
        for p in population.stacked.parameters():
            p[1].add_(0.01)
    solo = members(name)[0]
    solo.load_state_dict(population.member_state_dict(1))
    torch.testing.assert_close(solo(obs[1])[0], population(obs)[0][1], **TIGHT)
    # and back: a solo network's weights into member 2 (member 0 untouched)
    untouched = population.member_state_dict(0)
    population.load_member(2, solo.state_dict())
    assert_same_weights(population.member_state_dict(2), solo.state_dict())
    assert_same_weights(population.member_state_dict(0), untouched)


def test_a_member_state_dict_is_a_copy():
    population = Population(members("cartpole-mlp"))
    weights = population.member_state_dict(0)
    weights["actor.bias"].add_(1.0)
    assert not torch.equal(population.member_state_dict(0)["actor.bias"], weights["actor.bias"])


def test_mismatched_members_and_weights_are_refused_in_one_line():
    nets = members("cartpole-mlp")
    with pytest.raises(ValueError, match="member 1 is not the same network as member 0"):
        Population([nets[0], members("snake-mlp")[0]])
    with pytest.raises(ValueError, match="at least one member"):
        Population([])
    population = Population(nets)
    with pytest.raises(IndexError, match="member 3 out of range: the population has 3"):
        population.member_state_dict(3)
    wrong = members("snake-mlp")[0].state_dict()
    with pytest.raises(ValueError, match=r"member 0's torso.1.weight has shape \(16, 144\)"):
        population.load_member(0, wrong)
    del wrong["actor.bias"]
    with pytest.raises(ValueError, match=r"missing \['actor.bias'\], extra \[\]"):
        population.load_member(0, wrong)

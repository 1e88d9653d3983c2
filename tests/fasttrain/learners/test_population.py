"""A population (``learners/population.py``): members built as their solo runs, one batched
call that equals each member's own network, and the learners' own trainers made a width of M
members: member k trains as the solo run with seed k (PPO feed-forward and recurrent, PQN),
members with their own settings as their solo runs with those, a diverging member skipped
alone, every member's checkpoint read back through the solo run's checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.learners import make_trainer
from fasttrain.learners import population as module
from fasttrain.learners.population import (
    Population,
    build_members,
    population_problem,
    variants_problem,
)
from fasttrain.models import make_policy, make_q_network
from tests.conftest import small_snake

SEEDS = (3, 7)
# float rounding of a batched matrix product against the solo one (bit equality is not promised)
TIGHT = {"rtol": 1e-5, "atol": 1e-6}
# over a few updates of a run, where the rounding of each step feeds the next
LOOSE = {"rtol": 1e-4, "atol": 1e-6}


def quiet(*_):
    pass


# ------------------------------------------------------------------------ THE NETWORK

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
MEMBERS = 3


def members(name: str, q: bool = False) -> list[torch.nn.Module]:
    shape, dtype, categories, model = NETWORKS[name]
    torch.manual_seed(7)
    if q:
        return [
            make_q_network(shape, dtype, 3, model, obs_categories=categories, layer_norm=True)
            for _ in range(MEMBERS)
        ]
    return [make_policy(shape, dtype, 3, model, obs_categories=categories) for _ in range(MEMBERS)]


def observations(name: str, rows: int = 5) -> torch.Tensor:
    """Random observations ``(M, rows, *obs_shape)`` of the network ``name``'s game."""
    shape, dtype, categories, _ = NETWORKS[name]
    gen = torch.Generator().manual_seed(3)
    size = (MEMBERS, rows, *shape)
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
    seeds = (0, 1, 2)
    population = population_of(configs(algo, seeds))
    for k in (0, 2):  # two seeds: the first and one the solo run reaches by its own seeding
        trainer = make_trainer(config(algo, seeds[k]), quiet)
        assert_same_weights(population.network.member_state_dict(k), trainer.network.state_dict())
    first, second = (population.network.member_state_dict(k)["torso.1.weight"] for k in (0, 1))
    assert not torch.equal(first, second)


def test_building_members_leaves_the_callers_random_stream_alone():
    torch.manual_seed(5)
    want = torch.rand(3)
    torch.manual_seed(5)
    build_members(lambda: members("cartpole-mlp")[0], (0, 1, 2))
    assert torch.equal(torch.rand(3), want)


@pytest.mark.parametrize("name", ["cartpole-mlp", "snake-mlp", "snake-cnn", "arena-cnn"])
def test_the_batched_forward_is_each_members_own(name):
    nets = members(name)
    obs = observations(name)
    logits, values, state = Population(nets)(obs)
    assert state is None
    assert logits.shape == (MEMBERS, 5, 3) and values.shape == (MEMBERS, 5)
    for k, net in enumerate(nets):
        solo_logits, solo_values, _ = net(obs[k])
        torch.testing.assert_close(logits[k], solo_logits, **TIGHT)
        torch.testing.assert_close(values[k], solo_values, **TIGHT)
        torch.testing.assert_close(Population(nets).value(obs)[k], solo_values, **TIGHT)


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
    assert population.is_recurrent and population.state_size == nets[0].state_size
    obs = observations(core, rows=4)  # (M, 4, 4): 4 rows
    state = torch.randn(MEMBERS, 4, nets[0].state_size)
    starts = torch.tensor([True, False, False, True]).expand(MEMBERS, 4)
    logits, values, next_state = population(obs, state, starts)
    # unroll: (M, H=2, rows=2, ...) sequences from (M, 2, state_size) states
    seq_obs, seq_starts = obs.reshape(MEMBERS, 2, 2, 4), starts.reshape(MEMBERS, 2, 2)
    seq_logits, seq_values = population.unroll(seq_obs, state[:, :2], seq_starts)
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
    of a small network's step), whatever state and restart flags it is handed (a feed-forward
    network reads neither), with the numbers the generic vmap path gives; other networks keep
    vmap."""
    population = Population(members(name))
    assert population._plan is not None
    obs = observations(name)
    fast = population(obs)
    starts = torch.ones(obs.shape[:2], dtype=torch.bool)
    handed = population(obs, None, starts)
    assert all(torch.equal(a, b) for a, b in zip(fast[:2], handed[:2], strict=True))
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
    grads = [p.grad for p in population.stacked.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    dueling = [make_q_network((4,), np.float32, 3, NETWORKS["cartpole-mlp"][3], dueling=True)]
    assert Population(dueling)._plan is None


def test_a_large_input_runs_member_by_member_with_the_same_numbers(monkeypatch):
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
    target = torch.randn(MEMBERS, 5)

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


def test_the_parameters_are_blocks_of_one_flat_tensor_each_element_named_by_its_member():
    population = Population(members("cartpole-mlp"))
    params = list(population.parameters())
    assert len(params) == len(list(members("cartpole-mlp")[0].parameters()))
    assert all(p.is_leaf and p.requires_grad and p.shape[0] == MEMBERS for p in params)
    assert population.flat.numel() == sum(p.numel() for p in params)
    with torch.no_grad():
        for p in params:  # member k's slices to k: the flat tensor reads them back in place
            for k in range(MEMBERS):
                p[k].fill_(k)
    assert torch.equal(population.flat, population.member_of.float())


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
    weights = population.member_state_dict(0)  # a copy
    next(iter(weights.values())).add_(1.0)
    assert_same_weights(population.member_state_dict(0), untouched)


def test_mismatched_members_are_refused_in_one_line():
    nets = members("cartpole-mlp")
    with pytest.raises(ValueError, match="member 1 is not the same network as member 0"):
        Population([nets[0], members("snake-mlp")[0]])
    with pytest.raises(ValueError, match="at least one member"):
        Population([])


# ------------------------------------------------------------------------ THE TRAINERS


PPO_SIZES = {"num_envs": 16, "num_steps": 8, "num_minibatches": 2, "update_epochs": 1}
PQN_SIZES = {
    **{"num_envs": 16, "num_steps": 8, "num_minibatches": 4, "update_epochs": 2},
    **{"exploration_fraction": 0.5, "total_timesteps": 4096},
}
RECURRENT = {"core": "gru", "core_size": 8}


def config(algo="ppo", seed=0, model=None, **learner):
    sizes = PPO_SIZES if algo == "ppo" else PQN_SIZES
    extra = {"bptt_horizon": 4} if model and algo == "ppo" else {}
    return small_snake(
        run={"algo": algo, "seed": seed, "amp": "off"},
        model=model or {},
        game={"snake": {algo: {**sizes, **extra, **learner}}},
    )


def configs(algo="ppo", seeds=SEEDS, model=None, **learner) -> list:
    return [config(algo, s, model, **learner) for s in seeds]


def population_of(members: list):
    return make_trainer(members[0], quiet, members)


def block(tensor, k, n):
    """Member k's columns of a time-major (T, M * n, ...) tensor."""
    return tensor[:, k * n : (k + 1) * n]


STEPS = ("obs", "actions", "rewards", "terminated", "truncated")


def assert_member_is_its_solo_run(population, k, row, trainer):
    """After one more iteration of ``trainer`` (member k's solo run): the same observations,
    actions, rewards and flags bit for bit (PQN: its exploration draws too), the losses
    within 1e-4 and the weights within float rounding (batched matrix products round
    differently)."""
    (losses,) = trainer.iterate()
    solo, n = trainer.storage, population.n
    for name in STEPS:
        mine = block(getattr(population.storage, name), k, n)
        assert torch.equal(mine, getattr(solo, name)), (k, name)
    if trainer.config.run.algo == "pqn":
        for name in ("explore", "random_actions"):
            assert torch.equal(block(getattr(population, name), k, n), getattr(trainer, name))
        torch.testing.assert_close(block(population.storage.returns, k, n), solo.returns, **LOOSE)
    assert row.keys() == losses.keys()
    for key, value in losses.items():
        assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (k, key)
    weights = population.network.member_state_dict(k)
    for name, value in trainer.network.state_dict().items():
        torch.testing.assert_close(weights[name], value, **LOOSE)


@pytest.mark.parametrize("algo, model", [("ppo", None), ("ppo", RECURRENT), ("pqn", None)])
def test_member_k_trains_as_the_solo_run_with_seed_k(algo, model):
    """The same observations and actions step for step (the envs are bit-identical and each
    member draws from its own stream as its solo run), the updates within float rounding; a
    recurrent member steps with its own core's state and replays its sequences from it."""
    population = population_of(configs(algo, model=model))
    solos = [make_trainer(c, quiet) for c in configs(algo, model=model)]
    for _ in range(2):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
            if model:
                mine = block(population.storage.states, k, population.n)
                torch.testing.assert_close(mine, trainer.storage.states, **LOOSE)
    assert population.global_step == solos[0].global_step


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_members_with_their_own_settings_train_as_their_solo_runs(algo):
    """Members may differ in the settings the learner's registration names (here the
    learning rate, the discount and the trace decay; PPO's clip range, PQN's exploration):
    each trains as the solo run with its config, its rate read back from its checkpoint."""
    own = {"learning_rate": 0.01, "gamma": 0.9}
    if algo == "ppo":
        own.update(clip_coef=0.1, gae_lambda=0.5)
    else:
        own.update(q_lambda=0.3, start_e=0.5, end_e=0.2)
    members = [config(algo, 3), config(algo, 3, **own)]
    population = population_of(members)
    assert population.learning_rates() == pytest.approx([members[0].learner.learning_rate, 0.01])
    solos = [make_trainer(c, quiet) for c in members]
    for _ in range(2):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
    for k, trainer in enumerate(solos):
        group = population.member_state(k)["optimizer"]["param_groups"][0]
        assert group["lr"] == pytest.approx(trainer.learning_rate)


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_a_member_that_diverges_is_skipped_alone(algo):
    population = population_of(configs(algo))
    with torch.no_grad():
        for p in population.network.stacked.parameters():
            p[1].fill_(float("nan"))
    rows = population.iterate()
    updates = population.args.update_epochs * population.args.num_minibatches
    assert rows[1]["losses/skipped_updates"] == updates
    assert rows[0]["losses/skipped_updates"] == 0
    (first,) = [make_trainer(config(algo, SEEDS[0]), quiet)]
    first.iterate()
    weights = population.network.member_state_dict(0)
    for name, value in first.network.state_dict().items():
        torch.testing.assert_close(weights[name], value, **LOOSE)
    assert all(torch.isnan(t).all() for t in population.network.member_state_dict(1).values())


@pytest.mark.parametrize("algo, model", [("ppo", None), ("ppo", RECURRENT), ("pqn", None)])
def test_members_resume_as_their_solo_runs_and_the_population_bit_for_bit(algo, model):
    """Member k's checkpoint state (a solo run's form: torch Adam's optimizer state, its block
    of the env and of the rollout's starting point) resumes the solo trainer of seed k, and
    the population put back together from its members' states continues as the
    uninterrupted one, bit for bit."""
    whole = population_of(configs(algo, model=model))
    first = population_of(configs(algo, model=model))
    for _ in range(2):
        whole.iterate()
        first.iterate()
    states = [first.member_state(k) for k in range(len(SEEDS))]
    if model:
        assert states[1]["next_policy_state"].shape == (first.n, RECURRENT["core_size"])
    for k, seed in enumerate(SEEDS):
        trainer = make_trainer(config(algo, seed, model), quiet)
        trainer.load_state_dict(states[k])
        assert_same_weights(trainer.network.state_dict(), first.network.member_state_dict(k))
        assert trainer.iteration == first.iteration
        assert torch.equal(trainer.storage.obs[0], block(first.storage.obs, k, first.n)[0])
    resumed = population_of(configs(algo, model=model))
    # fresh states: torch's Adam.load_state_dict keeps the tensors it is given
    resumed.load_members([first.member_state(k) for k in range(len(SEEDS))])
    for _ in range(2):
        assert resumed.iterate() == whole.iterate()
    for name in STEPS:
        assert torch.equal(getattr(resumed.storage, name), getattr(whole.storage, name)), name
    assert_same_weights(resumed.network.state_dict(), whole.network.state_dict())


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_a_member_state_that_does_not_fit_is_refused_in_one_line_and_changes_nothing(algo):
    """Every member's state goes through the solo run's checks before anything changes: a
    carried tensor of the wrong shape, weights a member's network does not have, members
    saved at different steps, a state of the other learner."""
    saved = population_of(configs(algo))
    saved.iterate()
    trainer = population_of(configs(algo))
    before = {n: t.clone() for n, t in trainer.network.state_dict().items()}
    env_before = {n: a.copy() for n, a in trainer.env.state_dict().items()}

    def refused(edit, words):
        states = [saved.member_state(k) for k in range(len(SEEDS))]
        edit(states)
        with pytest.raises(ConfigError, match=words) as caught:
            trainer.load_members(states)
        assert "\n" not in str(caught.value)

    refused(lambda s: s[1].update(next_obs=s[1]["next_obs"][:3]), "next_obs")
    refused(lambda s: s[0]["model"].pop("actor.bias" if algo == "ppo" else "head.bias"), "model")
    refused(lambda s: s[1].update(global_step=s[1]["global_step"] + 1), "at different steps")
    refused(lambda s: s[0].update(learner="dqn"), "written by learner 'dqn'")
    assert_same_weights(trainer.network.state_dict(), before)
    for name, value in trainer.env.state_dict().items():
        assert (value == env_before[name]).all(), name
    assert trainer.iteration == 0


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_members_the_memory_cannot_hold_are_refused_in_one_line(algo, monkeypatch):
    """Every member's weights, gradients and Adam moments are checked before they are built:
    one network of the config needs ``weights`` bytes, 3 members 12x that; 11x is free."""
    from fasttrain import device

    net = make_trainer(config(algo), quiet).network
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    monkeypatch.setattr(device, "available_memory", lambda where: 11 * weights)
    words = r"the population's networks and Adam state \(3 members\) needs .* train fewer"
    with pytest.raises(ConfigError, match=words):
        population_of(configs(algo, (1, 2, 3)))


def test_a_population_of_no_member_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="empty"):
        make_trainer(config(), quiet, [])


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"run": {"algo": "dqn"}}, "a population trains ppo or pqn, not run.algo = 'dqn'"),
        ({"game": {"snake": {"ppo": {"overlap": True}}}}, "ppo.overlap = false"),
        ({"game": {"snake": {"ppo": {"target_kl": 0.02}}}}, "ppo.target_kl = 0"),
        ({"run": {"algo": "pqn", "amp": "fp16"}}, "run.amp = 'off' or 'bf16'"),
        ({"game": {"snake": {"ppo": {"optimizer": "muon"}}}}, "not ppo.optimizer = 'muon'"),
        ({"run": {"compile": "default"}}, "run.compile = 'off'"),
        ({"game": {"name": "arena"}}, "single-agent games; arena has several agents"),
    ],
)
def test_what_a_population_cannot_train_is_refused_in_one_line(extra, words):
    problem = population_problem(small_snake(**extra))
    assert words in problem and "\n" not in problem
    assert population_problem(small_snake()) is None


def test_members_may_differ_in_their_seed_and_the_registered_settings_only():
    base = config()
    assert variants_problem(base, [config("ppo", 5, learning_rate=0.1)]) is None
    problem = variants_problem(base, [config("ppo", 5, update_epochs=3)])
    assert problem.startswith("members differ in ppo.update_epochs: a population's members may")
    assert "vary only ppo.learning_rate, ppo.ent_coef" in problem
    other_game = small_snake(game={"snake": {"height": 7}})
    assert "game.snake.height" in variants_problem(base, [other_game])
    with pytest.raises(ConfigError, match="members differ in pqn.num_steps"):
        population_of([config("pqn", 3), config("pqn", 4, num_steps=4)])


def test_each_member_reads_its_own_episodes():
    population = population_of(configs())
    for _ in range(3):
        population.iterate()
    arrays = population.env.arrays
    counts = arrays["done_count"].reshape(len(SEEDS), -1).sum(1).tolist()
    returns = arrays["done_return"].reshape(len(SEEDS), -1).sum(1).tolist()
    stats = population.member_stats()
    assert [s.get("episodes", 0) for s in stats] == counts and sum(counts) > 0
    for s, count, total in zip(stats, counts, returns, strict=True):
        assert s["return"] == pytest.approx(total / count)
    assert population.env.stats() == {}  # read and cleared

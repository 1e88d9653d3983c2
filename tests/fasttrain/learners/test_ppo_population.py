"""PPO for a population (``learners/ppo_population.py``): member k trains as the solo run with
seed k, a member that diverges is skipped alone, what a population cannot train is refused."""

import pytest
import torch

from fasttrain.errors import ConfigError
from fasttrain.learners.ppo import Trainer
from fasttrain.learners.ppo_population import LOSS_NAMES, PopulationTrainer, population_problem
from tests.conftest import small_snake

SEEDS = (3, 7)


def config(seed=0, **extra):
    return small_snake(run={"seed": seed, "amp": "off"}, **extra)


def solo(seed):
    return Trainer(config(seed), warn=lambda *_: None)


def block(tensor, k, n):
    """Member k's columns of a time-major (T, M * n, ...) tensor."""
    return tensor[:, k * n : (k + 1) * n]


def assert_member_is_its_solo_run(population, k, row, trainer):
    """After one more iteration of ``trainer`` (member k's solo run): the same observations,
    actions, rewards and flags bit for bit, the losses within 1e-4, the weights within float
    rounding (batched matrix products round differently)."""
    losses = trainer.iterate()
    for name in ("obs", "actions", "rewards", "terminated", "truncated"):
        mine = block(getattr(population.storage, name), k, population.n)
        assert torch.equal(mine, getattr(trainer.storage, name)), (k, name)
    for name in LOSS_NAMES:
        key = f"losses/{name}"
        assert row[key] == pytest.approx(losses[key], rel=1e-4, abs=1e-6), (k, key)
    weights = population.population.member_state_dict(k)
    for name, value in trainer.policy.state_dict().items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-6)


def test_member_k_trains_as_the_solo_run_with_seed_k():
    """The same observations and actions step for step (the envs are bit-identical and each
    member samples from its own stream as its solo run), the first updates' losses and weights
    within float rounding (batched matrix products round differently)."""
    population = PopulationTrainer(config(), SEEDS)
    solos = [solo(s) for s in SEEDS]
    for k, trainer in enumerate(solos):
        start = population.population.member_state_dict(k)
        for name, value in trainer.policy.state_dict().items():
            assert torch.equal(start[name], value), (k, name)
    for _ in range(2):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
    assert population.global_step == solos[0].global_step


def test_each_member_reads_its_own_episodes():
    population = PopulationTrainer(config(), SEEDS)
    for _ in range(3):
        population.iterate()
    arrays = population.env.arrays
    counts = arrays["done_count"].reshape(len(SEEDS), -1).sum(1).tolist()
    stats = population.member_stats()
    assert [s.get("episodes", 0) for s in stats] == counts and sum(counts) > 0
    assert population.env.stats() == {}  # read and cleared


def test_a_member_that_diverges_is_skipped_alone():
    population = PopulationTrainer(config(), SEEDS)
    with torch.no_grad():
        for p in population.population.stacked.parameters():
            p[1].fill_(float("nan"))
    rows = population.iterate()
    updates = population.args.update_epochs * population.args.num_minibatches
    assert rows[1]["losses/skipped_updates"] == updates
    assert rows[0]["losses/skipped_updates"] == 0
    first = solo(SEEDS[0])
    first.iterate()
    weights = population.population.member_state_dict(0)
    for name, value in first.policy.state_dict().items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-6)
    assert all(torch.isnan(t).all() for t in population.population.member_state_dict(1).values())


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"run": {"algo": "dqn"}}, "run.algo = 'ppo'"),
        ({"game": {"snake": {"ppo": {"overlap": True}}}}, "ppo.overlap = false"),
        ({"game": {"snake": {"ppo": {"target_kl": 0.02}}}}, "ppo.target_kl = 0"),
    ],
)  # fmt: skip
def test_what_a_population_cannot_train_is_refused_in_one_line(extra, words):
    problem = population_problem(small_snake(**extra))
    assert words in problem and "\n" not in problem


RECURRENT = {"model": {"core": "gru", "core_size": 8},
             "game": {"snake": {"ppo": {"bptt_horizon": 4}}}}  # fmt: skip


def test_a_recurrent_member_trains_as_its_solo_run_and_resumes_bit_for_bit():
    """A GRU policy: member k steps with its own core's state (stored per row), replays its
    sequences from their stored states in the update, and matches the solo recurrent run with
    seed k; its state, the core's state included, resumes the solo run and the population."""
    population = PopulationTrainer(config(**RECURRENT), SEEDS)
    assert population.recurrent
    solos = [Trainer(config(s, **RECURRENT), warn=lambda *_: None) for s in SEEDS]
    for _ in range(2):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
            torch.testing.assert_close(block(population.storage.states, k, population.n),
                                       trainer.storage.states, rtol=1e-4, atol=1e-5)  # fmt: skip
    states = [population.member_state(k) for k in range(len(SEEDS))]
    assert states[1]["next_policy_state"].shape == (population.n, 8)
    again = PopulationTrainer(config(**RECURRENT), SEEDS)
    again.load_members(states)
    expected = population.iterate()
    assert again.iterate() == expected
    solo_again = Trainer(config(SEEDS[1], **RECURRENT), warn=lambda *_: None)
    solo_again.load_state_dict(states[1])
    assert torch.equal(solo_again.storage.states[0], states[1]["next_policy_state"])


def test_bad_seeds_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"seed\[1\] must be an int"):
        PopulationTrainer(config(), [1, "2"])
    with pytest.raises(ConfigError, match="empty"):
        PopulationTrainer(config(), [])


def test_a_resumed_population_continues_as_the_uninterrupted_one_bit_for_bit():
    whole = PopulationTrainer(config(), SEEDS)
    for _ in range(4):
        whole_rows = whole.iterate()
    first = PopulationTrainer(config(), SEEDS)
    for _ in range(2):
        first.iterate()
    saved = first.state_dict()
    resumed = PopulationTrainer(config(), SEEDS)
    resumed.load_state_dict(saved)
    for _ in range(2):
        rows = resumed.iterate()
    assert rows == whole_rows
    assert resumed.global_step == whole.global_step
    for name in ("obs", "actions", "rewards", "advantages"):
        assert torch.equal(getattr(resumed.storage, name), getattr(whole.storage, name)), name
    ours, theirs = resumed.population.stacked.state_dict(), whole.population.stacked.state_dict()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name


def test_a_state_of_other_seeds_is_refused_in_one_line_and_changes_nothing():
    saved = PopulationTrainer(config(), SEEDS).state_dict()
    other = PopulationTrainer(config(), (3, 8))
    before = {n: t.clone() for n, t in other.population.stacked.state_dict().items()}
    with pytest.raises(ConfigError, match=r"seeds \[3, 7\], this population's are \[3, 8\]"):
        other.load_state_dict(saved)
    for name, value in other.population.stacked.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_a_members_state_resumes_as_its_solo_run_and_the_population_from_its_members():
    """Member k's solo-format state loads into the solo trainer of seed k (every check of a
    resume passes: the optimizer in torch Adam's form, the env block), and the population put
    back together from its members' states continues bit for bit."""
    population = PopulationTrainer(config(), SEEDS)
    population.iterate()
    states = [population.member_state(k) for k in range(len(SEEDS))]
    for k, seed in enumerate(SEEDS):
        trainer = solo(seed)
        trainer.load_state_dict(states[k])
        weights = population.population.member_state_dict(k)
        for name, value in trainer.policy.state_dict().items():
            assert torch.equal(weights[name], value), (k, name)
        assert trainer.iteration == population.iteration
        trainer.iterate()  # the resumed member trains on as a solo run
    again = PopulationTrainer(config(), SEEDS)
    # fresh states: torch's Adam.load_state_dict keeps the tensors it is given, which the solo
    # trainers' steps above then changed
    again.load_members([population.member_state(k) for k in range(len(SEEDS))])
    expected = population.iterate()
    assert again.iterate() == expected
    ours, theirs = again.population.stacked.state_dict(), population.population.stacked.state_dict()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name


def test_members_with_their_own_settings_train_as_their_solo_runs():
    """Members may differ in learner scalars (here the learning rate, the clip range, the
    discount and the trace decay): each gets its own, read back from the optimizer and its
    solo-form state, and trains as the solo run with its config; nothing else differs."""
    lr = {"game": {"snake": {"ppo": {"learning_rate": 0.01, "clip_coef": 0.1, "gamma": 0.9,
                                     "gae_lambda": 0.5}}}}  # fmt: skip
    configs = [config(3), config(3, **lr)]
    population = PopulationTrainer(config(), (3, 3), configs)
    assert population.optimizer.lrs.tolist() == pytest.approx([configs[0].learner.learning_rate,
                                                               0.01])  # fmt: skip
    solos = [Trainer(c, warn=lambda *_: None) for c in configs]
    rows = population.iterate()
    for k, trainer in enumerate(solos):
        assert_member_is_its_solo_run(population, k, rows[k], trainer)
        group = population.member_state(k)["optimizer"]["param_groups"][0]
        assert group["lr"] == pytest.approx(trainer.learning_rate)


def test_members_that_differ_in_a_shared_setting_are_refused_in_one_line():
    other = config(3, game={"snake": {"ppo": {"update_epochs": 3}}})
    with pytest.raises(ConfigError, match=r"members differ in ppo.update_epochs: a population's "
                                          r"members may vary only ppo.learning_rate"):  # fmt: skip
        PopulationTrainer(config(), (3, 4), [config(3), other])

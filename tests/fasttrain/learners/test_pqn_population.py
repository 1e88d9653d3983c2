"""PQN for a population (``learners/pqn_population.py``): member k trains as the solo PQN run
with seed k (its exploration, its Q(lambda) returns, its update), members with their own
learning rate and exploration schedule train as their solo runs, the population resumes bit for
bit and from its members' solo-format states."""

import pytest
import torch

from fasttrain.errors import ConfigError
from fasttrain.learners.pqn import Trainer
from fasttrain.learners.pqn_population import LOSS_NAMES, PQNPopulationTrainer, population_problem
from tests.conftest import small_snake

SEEDS = (2, 9)
SIZES = {"num_envs": 16, "num_steps": 8, "num_minibatches": 4, "update_epochs": 2,
         "exploration_fraction": 0.5, "total_timesteps": 4096}  # fmt: skip


def config(seed=0, **pqn):
    return small_snake(
        run={"algo": "pqn", "seed": seed, "amp": "off"},
        game={"snake": {"pqn": {**SIZES, **pqn}}},
    )


def solo(c):
    return Trainer(c, warn=lambda *_: None)


def block(tensor, k, n):
    """Member k's columns of a time-major (T, M * n, ...) tensor."""
    return tensor[:, k * n : (k + 1) * n]


def assert_member_is_its_solo_run(population, k, row, trainer):
    """After one more iteration of ``trainer`` (member k's solo run): the same exploration
    draws, observations, actions, rewards and flags bit for bit, the returns, losses and
    weights within float rounding (batched matrix products round differently)."""
    losses = trainer.iterate()
    for name in ("explore", "random_actions", "obs", "actions", "rewards", "terminated",
                 "truncated"):  # fmt: skip
        mine = block(getattr(population, name), k, population.n)
        assert torch.equal(mine, getattr(trainer, name)), (k, name)
    torch.testing.assert_close(block(population.returns, k, population.n), trainer.returns,
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    assert row["charts/epsilon"] == losses["charts/epsilon"]
    for name in LOSS_NAMES:
        key = f"losses/{name}"
        assert row[key] == pytest.approx(losses[key], rel=1e-4, abs=1e-6), (k, key)
    weights = population.population.member_state_dict(k)
    for name, value in trainer.q_network.state_dict().items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-6)


def test_member_k_trains_as_the_solo_pqn_run_with_seed_k():
    population = PQNPopulationTrainer(config(), SEEDS)
    solos = [solo(config(s)) for s in SEEDS]
    for k, trainer in enumerate(solos):
        start = population.population.member_state_dict(k)
        for name, value in trainer.q_network.state_dict().items():
            assert torch.equal(start[name], value), (k, name)
    for _ in range(3):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
    assert population.global_step == solos[0].global_step


def test_members_with_their_own_rate_and_exploration_train_as_their_solo_runs():
    """Members may differ in the learning rate, the gradient clip and the exploration
    schedule: each gets its own (its epsilon in its rows, its rate read back from its
    solo-form optimizer state) and trains as the solo run with its config."""
    configs = [config(4), config(4, learning_rate=0.01, start_e=0.5, end_e=0.2)]
    population = PQNPopulationTrainer(config(), (4, 4), configs)
    solos = [solo(c) for c in configs]
    for _ in range(2):
        rows = population.iterate()
        for k, trainer in enumerate(solos):
            assert_member_is_its_solo_run(population, k, rows[k], trainer)
    assert rows[0]["charts/epsilon"] != rows[1]["charts/epsilon"]
    for k, trainer in enumerate(solos):
        group = population.member_state(k)["optimizer"]["param_groups"][0]
        assert group["lr"] == pytest.approx(trainer.learning_rate)


def test_a_resumed_pqn_population_continues_bit_for_bit_and_from_its_members():
    whole = PQNPopulationTrainer(config(), SEEDS)
    for _ in range(4):
        whole_rows = whole.iterate()
    first = PQNPopulationTrainer(config(), SEEDS)
    for _ in range(2):
        first.iterate()
    resumed = PQNPopulationTrainer(config(), SEEDS)
    resumed.load_state_dict(first.state_dict())
    members = PQNPopulationTrainer(config(), SEEDS)
    members.load_members([first.member_state(k) for k in range(len(SEEDS))])
    for again in (resumed, members):
        for _ in range(2):
            rows = again.iterate()
        assert rows == whole_rows
        ours, theirs = again.population.stacked.state_dict(), whole.population.stacked.state_dict()
        for name, value in theirs.items():
            assert torch.equal(ours[name], value), name


def test_a_members_state_resumes_as_its_solo_pqn_run():
    population = PQNPopulationTrainer(config(), SEEDS)
    population.iterate()
    for k, seed in enumerate(SEEDS):
        trainer = solo(config(seed))
        trainer.load_state_dict(population.member_state(k))
        weights = population.population.member_state_dict(k)
        for name, value in trainer.q_network.state_dict().items():
            assert torch.equal(weights[name], value), (k, name)
        assert trainer.iteration == population.iteration
        assert torch.equal(trainer.obs[0], block(population.obs, k, population.n)[0])


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"run": {"algo": "ppo"}}, "run.algo = 'pqn'"),
        ({"run": {"algo": "pqn", "amp": "fp16"}}, "run.amp = 'off' or 'bf16'"),
        ({"run": {"algo": "pqn"}, "game": {"snake": {"pqn": {"optimizer": "muon"}}}},
         "not pqn.optimizer = 'muon'"),
    ],
)  # fmt: skip
def test_what_a_pqn_population_cannot_train_is_refused_in_one_line(extra, words):
    problem = population_problem(small_snake(**extra))
    assert words in problem and "\n" not in problem


def test_pqn_members_that_differ_in_a_shared_setting_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"members differ in pqn.q_lambda: a population's "
                                          r"members may vary only pqn.learning_rate"):  # fmt: skip
        PQNPopulationTrainer(config(), (3, 4), [config(3), config(4, q_lambda=0.3)])

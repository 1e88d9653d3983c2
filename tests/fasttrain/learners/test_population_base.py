"""What every population learner shares (``learners/population_base.py``), for PPO and PQN:
the settings members may differ in, and the states a population refuses before anything
changes."""

import pytest
import torch

from fasttrain.errors import ConfigError
from fasttrain.learners.population_base import variants_problem
from fasttrain.learners.ppo_population import PopulationTrainer
from fasttrain.learners.pqn_population import PQNPopulationTrainer
from tests.conftest import small_snake

LEARNERS = {"ppo": PopulationTrainer, "pqn": PQNPopulationTrainer}


def config(algo, seed=0, **learner):
    sizes = {"num_envs": 8, "num_steps": 4, "num_minibatches": 2, "update_epochs": 1}
    return small_snake(
        run={"algo": algo, "seed": seed, "amp": "off"},
        game={"snake": {algo: {**sizes, **learner}}},
    )


def test_members_may_differ_in_their_seed_and_the_named_settings_only():
    base = config("ppo")
    assert variants_problem(base, [config("ppo", 5, learning_rate=0.1)], ("learning_rate",)) is None
    problem = variants_problem(base, [config("ppo", 5, ent_coef=0.5)], ("learning_rate",))
    assert problem == ("members differ in ppo.ent_coef: a population's members may vary only "
                       "ppo.learning_rate")  # fmt: skip
    other_game = small_snake(game={"snake": {"height": 7}})
    assert "game.snake.height" in variants_problem(base, [other_game], ("learning_rate",))


@pytest.mark.parametrize("algo", LEARNERS)
def test_members_saved_at_different_steps_are_refused_in_one_line(algo):
    trainer = LEARNERS[algo](config(algo), (1, 2))
    trainer.iterate()
    states = [trainer.member_state(0), trainer.member_state(1)]
    states[1]["global_step"] += 1
    with pytest.raises(ConfigError, match="checkpoints are at different steps"):
        LEARNERS[algo](config(algo), (1, 2)).load_members(states)


@pytest.mark.parametrize("algo", LEARNERS)
def test_a_state_whose_carried_rollout_does_not_fit_changes_nothing(algo):
    saved = LEARNERS[algo](config(algo), (1, 2)).state_dict()
    saved["next_obs"] = saved["next_obs"][:3]
    trainer = LEARNERS[algo](config(algo), (1, 2))
    before = {n: t.clone() for n, t in trainer.population.stacked.state_dict().items()}
    env_before = {n: a.copy() for n, a in trainer.env.state_dict().items()}
    with pytest.raises(ConfigError, match="the state's next_obs does not fit this population"):
        trainer.load_state_dict(saved)
    for name, value in trainer.population.stacked.state_dict().items():
        assert torch.equal(value, before[name]), name
    for name, value in trainer.env.state_dict().items():
        assert (value == env_before[name]).all(), name


@pytest.mark.parametrize("algo", LEARNERS)
def test_a_state_of_the_other_learner_is_refused_in_one_line(algo):
    other = "pqn" if algo == "ppo" else "ppo"
    saved = LEARNERS[other](config(other), (1, 2)).state_dict()
    with pytest.raises(ConfigError, match=f"not a {algo.upper()} population's state"):
        LEARNERS[algo](config(algo), (1, 2)).load_state_dict(saved)


@pytest.mark.parametrize("algo", LEARNERS)
def test_members_the_memory_cannot_hold_are_refused_in_one_line(algo, monkeypatch):
    """Every member's weights, gradients and Adam moments are checked before they are built:
    one network of the config needs ``weights`` bytes, 3 members 12x that; 11x is free."""
    from fasttrain.learners import base
    from fasttrain.population import build_members

    net = build_members(config(algo), [0])[0]
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    monkeypatch.setattr(base, "available_memory", lambda device: 11 * weights)
    with pytest.raises(ConfigError, match=r"the population's networks and Adam state \(3 "
                                          r"members\) needs .* train fewer members"):  # fmt: skip
        LEARNERS[algo](config(algo), (1, 2, 3))

"""A run's members as the runner sees them (``fasttrain/run/members.py``): member ``k``'s view
of a population's trainer (its share of the environments, its own episode means, its rate and
its checkpoint state), the episode stats and environment state read once per boundary for
every member, and each member's ``on_row``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrain.learners import make_trainer
from fasttrain.run.members import MemberView, Plan, Shared
from tests.conftest import small_snake

SEEDS = (3, 7)


def member(seed: int, **learner):
    sizes = {"num_envs": 8, "num_steps": 4, "num_minibatches": 2, "update_epochs": 1}
    return small_snake(
        run={"seed": seed, "amp": "off"}, game={"snake": {"ppo": {**sizes, **learner}}}
    )


def members():
    return [member(s) for s in SEEDS]


def test_each_view_is_its_members_share_of_the_trainer():
    configs = [member(3), member(7, learning_rate=0.01)]
    trainer = make_trainer(configs[0], lambda *_: None, configs)
    shared = Shared(trainer)
    views = [MemberView(trainer, k, c, shared) for k, c in enumerate(configs)]
    assert [v.env.num_envs for v in views] == [8, 8] and views[1].env.obs_shape == (4, 6, 6)
    assert (
        views[1].learning_rate == pytest.approx(0.01, rel=1e-5) and views[0].learning_rate != 0.01
    )
    assert views[1].args.learning_rate == 0.01
    for _ in range(3):
        trainer.iterate()
    counts = trainer.env.arrays["done_count"].reshape(2, -1).sum(1).tolist()
    stats = [v.env.stats() for v in views]  # one read of the trainer for both members
    assert [s.get("episodes", 0) for s in stats] == counts and sum(counts) > 0
    assert trainer.env.stats() == {}  # the read cleared the env's sums
    assert views[0].env.stats() == stats[0]  # the same boundary: the same read
    state = views[1].state_dict()
    assert state["global_step"] == views[1].global_step == trainer.global_step
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.01, rel=1e-5)
    assert state["next_obs"].shape == (8, 4, 6, 6)
    assert all(len(a) == 8 for a in state["env"].values())  # its own block of the envs


def test_a_boundary_reads_the_trainer_once_and_the_next_reads_again():
    trainer = make_trainer(members()[0], lambda *_: None)
    shared = Shared(trainer)
    reads = []
    trainer.member_stats = lambda: reads.append(trainer.iteration) or [{"episodes": 1}]
    shared.stats(0)
    shared.stats(0)
    trainer.iterate()
    shared.stats(0)
    assert reads == [0, 1]


def test_each_member_has_its_own_on_row_or_all_share_one():
    def one(row):
        return False

    def two(row):
        return True

    plan = Plan(members()[0], Path("out"), False, True, on_row=[one, two])
    assert plan.on_row_of(0) is one and plan.on_row_of(1) is two
    shared = Plan(members()[0], Path("out"), False, False, on_row=one)
    assert shared.on_row_of(0) is one and shared.on_row_of(5) is one

"""Small ``fasttrain bench`` plans the bench tests share: built by ``make_plan`` itself, so
every option passes the checks a real run's do."""

from __future__ import annotations

import dataclasses

from fasttrain.bench.plan import make_plan


def cartpole_plan(tmp_path, **options):
    """``make_plan`` on cartpole (cpu, quick, 1 thread, JSON in ``tmp_path``) with ``options``
    over those defaults."""
    defaults = dict(
        game_names=("cartpole",),
        device="cpu",
        num_envs=None,
        backend_names=(),
        quick=True,
        json_path=str(tmp_path / "bench.json"),
        plot_path=None,
        threads=1,
        repeats=None,
        seconds=None,
        train_iterations=None,
        train_num_envs=None,
        seed=0,
    )
    return make_plan(**{**defaults, **options})


def target_plan(tmp_path, **changes):
    """A targets-only plan on cartpole (cpu, 1 thread, 1 seed) with ``changes`` applied."""
    plan = cartpole_plan(tmp_path, targets=True, targets_only=True)
    return dataclasses.replace(plan, target_seeds=1, **changes)


def env_plan(game: str, backends: tuple[str, ...]):
    return make_plan(
        game_names=(game,),
        device="cpu",
        num_envs=[4],
        backend_names=backends,
        quick=True,
        json_path=None,
        plot_path=None,
        threads=1,
        repeats=3,
        seconds=0.01,
        train_iterations=None,
        train_num_envs=None,
        seed=0,
        targets=False,
    )


def train_plan(tmp_path, cores=("lstm",)):
    """A small cartpole plan for the training rows of every learner (and the rows at other
    settings, which --quick leaves out): 8 envs, 1 iteration, 1 repeat, 1 thread."""
    from fasttrain.learners import LEARNERS

    plan = cartpole_plan(
        tmp_path, repeats=1, train_iterations=1, train_num_envs=8, targets=False, cores=cores
    )
    return dataclasses.replace(plan, quick=False, learners=tuple(LEARNERS))

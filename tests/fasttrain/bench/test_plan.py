"""fasttrain.bench.plan: every option checked before anything is measured, and what a plan
measures (games, backends, sweeps, learners, targets) from the options given."""

from __future__ import annotations

import click
import numba
import pytest

from fasttrain.bench import parse_num_envs
from fasttrain.bench.plan import (
    FULL,
    FULL_SWEEP,
    QUICK,
    QUICK_GAMES,
    QUICK_SWEEP,
    TARGETS,
    check_options,
    plan_backends,
    plan_games,
    plan_targets,
)
from tests.fasttrain.bench.plans import cartpole_plan, train_plan


def test_quick_defaults_to_snake_and_cartpole_cpu_rows_and_all_widens_it(tmp_path):
    from fasttrain import games
    from fasttrain.learners import LEARNERS

    quick = cartpole_plan(tmp_path, game_names=())
    assert quick.games == ["snake", "cartpole"] and quick.backends == ["cpu"]
    assert quick.train_games == ("snake",) and quick.learners == ("ppo",)
    assert not quick.compile_times and quick.target_games == {"cartpole": ("return", (475.0,))}
    assert quick.target_budget_s["sb3"] == 20.0 and quick.target_seeds == 1
    assert cartpole_plan(tmp_path, game_names=("all",)).games == games.names()
    full = cartpole_plan(tmp_path, game_names=(), quick=False)
    assert full.games == games.names() and full.backends == ["python", "cpu"]
    assert full.learners == tuple(LEARNERS) and full.compile_times


def test_parse_num_envs_sorts_and_dedupes():
    assert parse_num_envs(None, None, "256,64,64") == [64, 256]
    assert parse_num_envs(None, None, None) is None


def test_make_plan_keeps_the_cores_in_order_once(tmp_path):
    from fasttrain.bench.plan import RECURRENT_CORES
    from fasttrain.models import CORES

    assert RECURRENT_CORES == tuple(c for c in CORES if c != "none")
    plan = train_plan(tmp_path, cores=("gru", "lstm", "gru"))
    assert plan.cores == ("gru", "lstm") and plan.settings()["cores"] == ["gru", "lstm"]
    assert train_plan(tmp_path, cores=()).settings()["cores"] == []
    with pytest.raises(click.BadParameter, match="unknown core 'rnn'; valid: lstm, gru"):
        train_plan(tmp_path, cores=("rnn",))


@pytest.mark.parametrize("value", ["64,x", "0", "64,-1", "", "1.5"])
def test_parse_num_envs_refuses_what_is_not_a_list_of_positive_integers(value):
    with pytest.raises(click.BadParameter, match="comma-separated list of positive integers"):
        parse_num_envs(None, None, value)
    assert parse_num_envs(None, None, "7") == [7]


@pytest.mark.parametrize(
    "named, quick, device_backend, backends",
    [
        ((), False, "cpu", ["python", "cpu"]),
        ((), False, "cuda", ["python", "cpu", "cuda"]),
        ((), True, "cpu", ["cpu"]),  # --quick: the baseline row stands for python
        ((), True, "cuda", ["cpu", "cuda"]),
        (("cuda", "python"), False, "cuda", ["python", "cuda"]),  # the usual order, not theirs
        (("python",), True, "cpu", ["python"]),  # named, python stays under --quick
    ],
)
def test_plan_backends_are_the_named_ones_or_every_one_the_device_has(
    named, quick, device_backend, backends
):
    assert plan_backends(named, quick, device_backend) == backends


def test_backend_cuda_on_a_cpu_device_is_refused():
    with pytest.raises(click.UsageError, match="--backend cuda needs --device cuda"):
        plan_backends(("cpu", "cuda"), False, "cpu")


def test_plan_games_takes_all_or_the_named_ones_once_in_order():
    valid = ["snake", "cartpole", "arena"]
    assert plan_games(("arena", "all"), False, valid) == valid
    assert plan_games(("arena", "snake", "arena"), True, valid) == ["arena", "snake"]
    assert plan_games((), True, valid) == list(QUICK_GAMES)
    assert plan_games((), False, valid) == valid


def test_plan_targets_are_the_games_with_a_target_and_a_budget():
    games = ["arena", "snake", "cartpole"]
    assert plan_targets(games, True, FULL["target_budget_s"]) == {
        "snake": TARGETS["snake"],
        "cartpole": TARGETS["cartpole"],
    }
    assert plan_targets(games, True, QUICK["target_budget_s"]) == {"cartpole": TARGETS["cartpole"]}
    assert plan_targets(games, False, FULL["target_budget_s"]) == {}
    assert plan_targets(["arena"], True, FULL["target_budget_s"]) == {}


def test_a_plan_takes_the_given_figures_over_its_presets(tmp_path):
    plan = cartpole_plan(
        tmp_path, quick=False, num_envs=[8, 32], repeats=7, seconds=0.5, train_num_envs=16
    )
    assert plan.sweep == {"python": [8, 32], "cpu": [8, 32]}  # one sweep for every backend
    assert (plan.repeats, plan.seconds, plan.train_num_envs) == (7, 0.5, 16)
    assert plan.train_repeats == FULL["train_repeats"]  # at most the preset's whole calls
    assert cartpole_plan(tmp_path, quick=False, repeats=2).train_repeats == 2  # or fewer
    full = cartpole_plan(tmp_path, quick=False)
    assert full.sweep == {b: FULL_SWEEP[b] for b in ("python", "cpu")}
    assert (full.repeats, full.seconds) == (FULL["repeats"], FULL["seconds"])
    assert full.train_iterations == FULL["train_iterations"] and full.train_num_envs is None
    assert full.settings()["train_num_envs"] == "default config"
    quick = cartpole_plan(tmp_path, threads=None)
    assert quick.sweep == {"cpu": QUICK_SWEEP["cpu"]} and quick.train_num_envs == 64
    assert quick.threads == numba.config.NUMBA_NUM_THREADS  # every core Numba sees


def test_the_sb3_target_follows_cartpoles_target_and_no_targets_writes_none(tmp_path):
    plan = cartpole_plan(tmp_path)
    assert plan.sb3_target == TARGETS["cartpole"][1][0] == 475.0
    settings = plan.settings()["targets"]
    assert settings["games"] == {"cartpole": {"metric": "return", "values": [475.0]}}
    assert settings["sb3_return"] == 475.0 and settings["budget_s"] == QUICK["target_budget_s"]
    off = cartpole_plan(tmp_path, targets=False)
    assert off.target_games == {} and off.sb3_target is None
    assert off.settings()["targets"] is None
    snake = cartpole_plan(tmp_path, game_names=("snake",), quick=False)
    assert snake.sb3_target is None and set(snake.target_games) == {"snake"}


def test_check_options_refuses_each_bad_option_in_one_line(tmp_path):
    def check(**changes):
        options = dict(
            game_names=("snake",),
            device="cpu",
            json_path=None,
            plot_path=None,
            threads=None,
            targets=True,
            targets_only=False,
            cores=(),
        )
        return check_options(**{**options, **changes})

    assert check().type == "cpu"
    refusals = [
        (dict(game_names=("snake", "nope")), "unknown game 'nope'; valid: all, "),
        (dict(json_path=str(tmp_path / "missing" / "b.json")), "does not exist"),
        (dict(threads=numba.config.NUMBA_NUM_THREADS + 1), "NUMBA_NUM_THREADS"),
        (dict(targets=False, targets_only=True), "leave nothing to measure"),
        (dict(targets_only=True, cores=("lstm",)), "--core adds training rows"),
        (dict(cores=("rnn",)), "unknown core 'rnn'"),
    ]
    for changes, message in refusals:
        with pytest.raises(click.ClickException) as info:
            check(**changes)
        assert message in info.value.format_message() and "\n" not in info.value.message

"""``fasttrain run``'s request (``fasttrain/run/command.py``): its options read once into one
frozen object, the command line torchrun's ranks are given back from it, and the config it
makes (command-line options over the user's layers over a resumed checkpoint's)."""

from __future__ import annotations

import dataclasses

import pytest

from fasttrain.cli import main
from fasttrain.errors import ConfigError
from fasttrain.run.command import RunRequest, run_config


def request_of(args: list[str]) -> RunRequest:
    """The request ``fasttrain run ARGS`` makes, as click parses it."""
    context = main.get_command(None, "run").make_context("run", list(args))
    return RunRequest(**context.params)


def test_a_request_is_frozen_and_gives_back_the_command_line_the_ranks_run():
    args = ["--game", "cartpole", "--steps", "4096", "--num-envs", "16", "--seed", "3"]
    args += ["--config", "my.toml", "--set", "ppo.ent_coef=0.1", "--set", "model.hidden=8"]
    request = request_of([*args, "--verbose", "--nproc", "2"])
    assert request.nproc == 2 and request.sets == ("ppo.ent_coef=0.1", "model.hidden=8")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 4
    assert request.argv() == [*args, "--verbose"]  # --nproc is the launcher's, not a rank's
    assert request_of(request.argv()) == dataclasses.replace(request, nproc=1)


def test_the_config_takes_the_options_over_the_sets_over_the_checkpoint():
    saved = {"run": {"seed": 9, "algo": "ppo"}, "game": {"name": "cartpole"}}
    sets = ("ppo.num_envs=32", "ppo.ent_coef=0.2")
    config = run_config(RunRequest(num_envs=16, sets=sets, verbose=True), saved)
    assert config.game.name == "cartpole" and config.run.seed == 9  # the checkpoint's
    assert config.learner.num_envs == 16 and config.learner.ent_coef == 0.2
    assert config.log.wide and config.sources["log.wide"] == "command line"
    assert run_config(RunRequest(seed=5), saved).run.seed == 5


def test_a_setting_of_a_learner_that_does_not_run_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="dqn") as caught:
        run_config(RunRequest(game="cartpole", algo="ppo", sets=("dqn.batch_size=8",)))
    assert "\n" not in str(caught.value)

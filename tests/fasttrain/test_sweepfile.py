"""fasttrain.sweepfile: a sweep file is checked before any trial; a bad one ends in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fasttrain import sweepfile
from fasttrain.cli import main
from tests.cli import ROOT

BASE = """
[run]
device = "cpu"
torch_threads = 1
numba_threads = 1
[game]
name = "cartpole"
[ppo]
total_timesteps = 4096
num_envs = 8
"""


def write(folder: Path, text: str, name: str = "sweep.toml") -> Path:
    path = folder / name
    path.write_text(BASE + text)
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, ["sweep", *args])


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


BAD = {
    "unknown key": (
        '[sweep]\nobjective = "final_return"\n[sweep.params]\n"ppo.learning_rat" = '
        "{ low = 0.1, high = 0.2 }\n",
        "unknown key 'learning_rat' in [ppo]; valid: total_timesteps",
    ),
    "low above high": (
        '[sweep]\nobjective = "final_return"\n[sweep.params]\n"ppo.learning_rate" = '
        "{ low = 0.2, high = 0.1 }\n",
        "low must be < high",
    ),
    "unknown objective": (
        '[sweep]\nobjective = "fastest"\n[sweep.params]\n"ppo.learning_rate" = '
        "{ low = 0.1, high = 0.2 }\n",
        "sweep.objective must be one of time_to_target, final_return, final_score",
    ),
    "no [sweep]": ("", "no [sweep] table"),
    "empty params": ('[sweep]\nobjective = "final_return"\n[sweep.params]\n', "at least one key"),
    "no target": (
        '[sweep]\nbudget_s = 5.0\n[sweep.params]\n"ppo.learning_rate" = '
        "{ low = 0.1, high = 0.2 }\n",
        "needs sweep.target",
    ),
    "int key, float range": (
        '[sweep]\nobjective = "final_return"\n[sweep.params]\n"ppo.update_epochs" = '
        "{ low = 1.5, high = 4 }\n",
        "ppo.update_epochs must be int, got 1.5",
    ),
    "another learner's key": (
        '[sweep]\nobjective = "final_return"\n[sweep.params]\n"dqn.learning_rate" = '
        "{ low = 0.1, high = 0.2 }\n",
        "changes nothing: run.algo is 'ppo'",
    ),
    "another learner's section": (
        '[pqn]\ngamma = 0.9\n[sweep]\nobjective = "final_return"\n[sweep.params]\n'
        '"ppo.learning_rate" = { low = 0.1, high = 0.2 }\n',
        "[pqn] gamma = 0.9 is never read: this run's learner is ppo",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_sweep_files_end_in_one_line_before_any_trial(case, tmp_path):
    text, expected = BAD[case]
    out = tmp_path / "out"
    result = invoke("--config", str(write(tmp_path, text)), "--out", str(out))
    assert result.exit_code not in (0, None)
    assert expected in one_line(result)
    assert not out.exists()


def test_a_sweep_of_learners_may_set_each_learners_section(tmp_path):
    text = (
        '[pqn]\ngamma = 0.9\n[sweep]\nobjective = "final_return"\n[sweep.params]\n'
        '"run.algo" = { choices = ["ppo", "pqn"] }\n'
    )
    sweep = sweepfile.load(write(tmp_path, text))
    assert sweep.trial_config({"run.algo": "pqn"}).learner.gamma == 0.9


def test_the_example_population_sweep_file_varies_only_what_members_may():
    s = sweepfile.load(ROOT / "examples" / "sweep_cartpole_population.toml")
    assert s.base.game.name == "cartpole" and len(s.params) == 4
    assert sweepfile.population_problem(s) is None


def test_the_example_sweep_file_is_valid():
    s = sweepfile.load(ROOT / "examples" / "sweep_cartpole.toml")
    assert s.settings.objective == "time_to_target" and s.settings.target == 475.0
    assert s.base.game.name == "cartpole"
    assert {p.key for p in s.params} == {
        "ppo.learning_rate",
        "ppo.update_epochs",
        "ppo.num_envs",
        "game.cartpole.ppo.num_minibatches",
    }
    # every corner of the search space is a config that builds
    for pick in (min, max):
        values = {p.key: pick(p.choices or (p.low, p.high)) for p in s.params}
        learner = s.trial_config(values).learner
        assert learner.num_envs == values["ppo.num_envs"]
        assert learner.num_minibatches == values["game.cartpole.ppo.num_minibatches"]

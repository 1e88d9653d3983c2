"""The command line's checks: a bad command is refused in one line before any work, and the
refusal imports neither torch nor Numba (so it answers at once)."""

import pytest
from click.testing import CliRunner

from fasttrain.cli import main
from tests.cli import finish, start

# run as `python -m fasttrain.cli ARGS`; at exit, print which heavy modules were ever imported
# (nothing removes a module from sys.modules, so "not there at exit" is "never imported")
PROBE = """
import atexit, runpy, sys
def report():
    heavy = [name for name in ("torch", "numba") if name in sys.modules]
    print("IMPORTED:" + ",".join(heavy), file=sys.stderr)
atexit.register(report)
sys.argv = ["fasttrain", *sys.argv[1:]]
runpy.run_module("fasttrain.cli", run_name="__main__", alter_sys=True)
"""

REFUSALS = {
    "game": (["run", "--game", "nope"], "Error: unknown game 'nope'; valid: arena, cartpole"),
    "key": (["run", "--set", "ppo.bogus=1"], "Error: unknown key 'bogus' in [ppo]; valid: "),
    "algo": (["run", "--algo", "nope"], "Error: run.algo must be one of ppo, dqn, pqn; got"),
    "section": (["run", "--set", "nope.x=1"], "Error: unknown section [nope]; valid: run, game"),
    "type": (["run", "--set", "ppo.num_envs=many"], "Error: ppo.num_envs must be int, got"),
    "choice": (["run", "--device", "tpu"], "Error: run.device must be one of auto, cpu, cuda"),
    "param": (["run", "--set", "game.snake.nope=1"], "Error: [game.snake]: "),
    "file": (["run", "--config", "/nonexistent.toml"], "Error: config file not found"),
    "seeds": (["run", "--seeds", "1,x"], "Error: --seeds '1,x': 'x' is not a seed or a range"),
}


def test_a_refused_run_imports_neither_torch_nor_numba():
    procs = {name: start("-c", PROBE, *args) for name, (args, _) in REFUSALS.items()}
    for name, proc in procs.items():
        result = finish(proc, timeout=60)
        lines = result.stderr.splitlines()
        assert result.returncode == 1, (name, result.stderr)
        assert lines[0].startswith(REFUSALS[name][1]), (name, result.stderr)
        assert lines[1:] == ["IMPORTED:"], (name, result.stderr)  # one line, nothing heavy


@pytest.mark.parametrize("name", REFUSALS)
def test_a_bad_run_command_is_refused_in_one_line(name):
    args, line = REFUSALS[name]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith(line), result.output
    assert len(result.output.splitlines()) == 1, result.output


def test_a_valid_value_out_of_range_is_refused_after_the_layers_are_read():
    result = CliRunner().invoke(main, ["run", "--set", "ppo.gamma=2", "--device", "cpu"])
    assert result.exit_code == 1
    assert result.output == "Error: ppo.gamma must be in [0, 1], got 2.0\n"


def test_a_setting_of_a_learner_that_does_not_run_is_refused_in_one_line():
    args = ["run", "--game", "minatar-seaquest", "--device", "cpu", "--set", "ppo.ent_coef=0.1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output == (
        "Error: --set ppo.ent_coef: this run's learner is pqn (minatar-seaquest preset), which "
        "reads [pqn], not [ppo]; pass --algo ppo to train with ppo\n"
    )
    args = ["run", "--algo", "pqn", "--device", "cpu", "--set", "ppo.overlap=true"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "(--algo), which reads [pqn], not [ppo]" in result.output


def test_resume_and_out_together_are_refused(tmp_path):
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path), "--out", "x"])
    assert result.exit_code == 1
    assert "--resume continues in its own directory; drop --out" in result.output

"""The command line's checks: a bad command is refused in one line before any work, and the
refusal imports neither torch nor Numba (so it answers at once) where it needs neither: a bad
environment variable, a count no loop could finish, a kernel cache others may write."""

import sys

import pytest
from click.testing import CliRunner

from fasttrain.cli import main
from tests.cli import finish, one_line, start, start_cli

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


HUGE = 2**70  # 1180591620717411303424: accepted once, the first iteration never ended
TOO_MANY_EPOCHS = f"Error: ppo.update_epochs must be in [1, 1000], got {HUGE}"
CARTPOLE = ["--game", "cartpole", "--steps", "64", "--device", "cpu"]
# a bad environment variable, or a bound a loop's length needs: one line before any work
# (name -> (environment, arguments, first words of the line, whether Numba may have loaded))
BEFORE_ANY_WORK = {
    "world-size": (
        {"WORLD_SIZE": "abc"},
        ["run", *CARTPOLE],
        "Error: WORLD_SIZE=abc: not a whole number; the number of processes, 1 or more, as "
        "torchrun sets it (fasttrain run --nproc N starts torchrun)",
        False,
    ),
    "no-rank": (
        {"WORLD_SIZE": "2"},
        ["run", *CARTPOLE],
        "Error: WORLD_SIZE=2: RANK is not set; each process of a data-parallel run needs its "
        "RANK (0 to 1)",
        False,
    ),
    "nproc": (  # read before torchrun starts
        {"WORLD_SIZE": "2 ranks"},
        ["run", "--nproc", "2", *CARTPOLE],
        "Error: WORLD_SIZE=2 ranks: not a whole number; ",
        False,
    ),
    "numba-zero": (
        {"NUMBA_NUM_THREADS": "0"},
        ["run", *CARTPOLE],
        "Error: NUMBA_NUM_THREADS=0: below 1; the threads of Numba's pool, 1 or more",
        False,
    ),
    "numba-word": (
        {"NUMBA_NUM_THREADS": "abc"},
        ["games"],
        "Error: NUMBA_NUM_THREADS=abc: not a whole number; the threads of Numba's pool",
        False,
    ),
    "checked": (
        {"FASTTRAIN_CHECKED_KERNELS": "2"},
        ["play", "--game", "snake", "--fps", "0"],
        "Error: FASTTRAIN_CHECKED_KERNELS=2: neither 0 nor 1; 1 compiles bounds-checked",
        True,
    ),
    "cuda-layout": (
        {"FASTTRAIN_CUDA_LAYOUT": "rows"},
        ["games"],
        "Error: FASTTRAIN_CUDA_LAYOUT=rows: not a layout; env-major, obs-minor, env-minor",
        False,
    ),
    "cpu-class": (
        {"FASTTRAIN_CPU": "sse4"},
        ["games"],
        "Error: FASTTRAIN_CPU=sse4: not a CPU class fasttrain emulates; avx2, or unset",
        False,
    ),
    "set": ({}, ["run", *CARTPOLE, "--set", f"ppo.update_epochs={HUGE}"], TOO_MANY_EPOCHS, True),
    "file": ({}, ["run", *CARTPOLE, "--config", "FILE"], TOO_MANY_EPOCHS, True),
}


def test_a_bad_environment_or_an_endless_loop_is_refused_in_one_line_before_any_work(tmp_path):
    config = tmp_path / "epochs.toml"
    config.write_text(f"[ppo]\nupdate_epochs = {HUGE}\n")
    procs = {}
    for name, (env, args, _, _) in BEFORE_ANY_WORK.items():
        args = [str(config) if a == "FILE" else a for a in args]
        out = ["--out", tmp_path / name] if args[0] == "run" else []
        procs[name] = start("-c", PROBE, *args, *out, env=env)
    for name, proc in procs.items():
        result = finish(proc, timeout=120)
        *lines, imported = result.stderr.splitlines()
        assert result.returncode == 1 and len(lines) == 1, (name, result.stderr)
        assert lines[0].startswith(BEFORE_ANY_WORK[name][2]), (name, result.stderr)
        assert BEFORE_ANY_WORK[name][3] or imported == "IMPORTED:", (name, imported)
        assert not (tmp_path / name).exists(), name  # no run directory: nothing started


def test_a_kernel_cache_others_may_write_is_refused_in_one_line(tmp_path):
    if sys.platform == "win32":
        pytest.skip("Windows has no such modes")
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    env = {"FASTTRAIN_CACHE_DIR": str(cache)}
    result = finish(start_cli("play", "--game", "cartpole", "--fps", "0", env=env), timeout=120)
    assert one_line(result) == (
        f"Error: kernel cache {cache} is writable by others (mode 0777); a kernel cache is code: "
        f"use a folder only you can write (chmod go-w {cache}) or set FASTTRAIN_CACHE_DIR"
    )
    assert not any(cache.iterdir())  # nothing written into it, nothing loaded from it

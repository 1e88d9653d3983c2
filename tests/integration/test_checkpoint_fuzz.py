"""A checkpoint from anyone is safe to open, whatever values its well-formed, correctly
checksummed file holds: the seeded checkpoint fuzzer (``tests/fuzzing.py``).

Each case changes one field of a tiny real checkpoint (an environment-state array of a game, a
learner-state scalar or tensor, a header, identity or saved-config field) and gives it to every
command that reads checkpoints (``run --resume``, ``checkpoint inspect``, ``play``, ``eval``)
that reads that field (``play`` and ``eval`` play fresh environments with the acting network:
they get the network and header cases, not the environment state or the optimizer's), each
reading in a child process with bounds-checked kernels and a timeout. A reading must end in
a correct run or a one-line refusal; a crash, a hang, an out-of-bounds access, a traceback,
several lines of error or a value that had to be refused and was used fail the test, with a
table of the failures and one command per failure that reproduces it.

The default tier reads a small seeded sample of Snake PPO's cases; the whole matrix (every game,
every learner, overlapped and recurrent PPO) is ``slow``. ``FASTTRAIN_FUZZ_SEED`` draws other
cases, ``FASTTRAIN_FUZZ_COUNT`` sets how many per base (``all``: every one).
"""

from __future__ import annotations

import json
import os

import pytest

from tests import fuzzing, fuzzpopulation
from tests.cli import finish, start

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="the fuzzer forks one child per reading (POSIX only)"
)

SEED = int(os.environ.get("FASTTRAIN_FUZZ_SEED", fuzzing.SEED))
COUNT = os.environ.get("FASTTRAIN_FUZZ_COUNT")
# the slow tier's bases, in two halves that xdist may run side by side
HALVES = (
    [
        "snake-ppo",
        "cartpole-ppo",
        "arena-ppo",
        "minatar-asterix-ppo",
        "minatar-breakout-ppo",
        "snake-ppo-overlap",
    ],
    [
        "minatar-freeway-ppo",
        "minatar-seaquest-ppo",
        "minatar-space_invaders-ppo",
        "cartpole-ppo-gru",
        "cartpole-pqn",
        "minatar-asterix-pqn",
        "cartpole-dqn",
    ],
)
POPULATIONS = ["cartpole-ppo-population", "cartpole-pqn-population"]  # tests/fuzzpopulation.py
assert sorted(HALVES[0] + HALVES[1] + POPULATIONS) == sorted(fuzzing.BASES)  # every base, once


def fuzz(tmp_path, bases, count, timeout, *extra) -> dict:
    """The fuzzer's outcomes for ``bases`` (``count`` cases each) from one server process."""
    out = tmp_path / "outcomes.json"
    count = COUNT or count
    sizes = [] if count == "all" else ["--count", count]
    proc = start(
        "-m",
        "tests.fuzzing",
        *bases,
        "--seed",
        SEED,
        *sizes,
        "--work",
        tmp_path,
        "--json",
        out,
        *extra,
        env=fuzzing.CHILD_ENV,
        cwd=tmp_path,
    )
    result = finish(proc, timeout=timeout)
    assert out.is_file(), f"the fuzzer stopped (exit {result.returncode}):\n{result.stderr[-3000:]}"
    return json.loads(out.read_text())


def check(outcomes: dict, bases) -> None:
    rows = outcomes["rows"]
    assert {row["base"] for row in rows} == set(bases)
    for base in bases:  # each base read by each of its readers
        readers = fuzzpopulation.READERS if fuzzing.is_population(base) else fuzzing.READERS
        assert {row["reader"] for row in rows if row["base"] == base} == set(readers)
    failed = [row for row in rows if row["outcome"] == "FAIL"]
    assert not failed, "\n" + fuzzing.table(rows, SEED)


def test_a_seeded_sample_of_hostile_checkpoints_is_refused_in_one_line_or_runs(tmp_path):
    """Snake PPO, a few cases of each kind, every reader, and a PPO population's (a member's
    checkpoint, population.json, --seeds and --vary forms); first the fuzzer's own check that
    it tells a crash, a hang, a traceback, a refusal and a run apart."""
    bases = ["snake-ppo", "cartpole-ppo-population"]
    outcomes = fuzz(tmp_path, bases, 8, 240, "--self-check")
    kinds = {"env", "learner", "tensor", "header"}
    assert {row["kind"] for row in outcomes["rows"] if row["base"] == bases[0]} == kinds
    kinds |= {"file", "command"}
    assert {row["kind"] for row in outcomes["rows"] if row["base"] == bases[1]} == kinds
    check(outcomes, bases)


@pytest.mark.slow
@pytest.mark.parametrize("half", [0, 1])
def test_every_game_and_learner_reads_hostile_checkpoints_safely(tmp_path, half):
    """Every game (its every state array) and every learner: a few hundred readings each half,
    about two minutes each on a warm kernel cache."""
    bases = HALVES[half]
    check(fuzz(tmp_path, bases, 40, 900), bases)


@pytest.mark.slow
@pytest.mark.parametrize("base", POPULATIONS)
def test_populations_read_every_hostile_member_file_and_command_safely(tmp_path, base):
    """Every case of a population of two (PPO, PQN): the solo cases on one member's
    checkpoint, each population.json field and form, the member folders, --seeds and --vary
    forms; about a minute each."""
    check(fuzz(tmp_path, [base], "all", 900), [base])


def small_state() -> dict:
    """A checkpoint-shaped state with a real Snake environment state, built in this process."""
    import torch

    import fasttrain

    env = fasttrain.make("snake", num_envs=2, backend="python", seed=0, height=5, width=5)
    return {
        "format": 3,
        "learner": "ppo",
        "global_step": 64,
        "iteration": 2,
        "time_s": 0.5,
        "device": "cpu",
        "env": env.state_dict(),
        "model": {"actor.weight": torch.ones(4, 3), "actor.bias": torch.zeros(4)},
        "optimizer": {"param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": [0, 1]}]},
        "identity": {"game": "snake", "model": {"hidden": 16}, "num_envs": 2, "obs_shape": (4,)},
        "config": "[model]\nhidden = 16\n\n[game.snake]\nheight = 5\nwidth = 5\n",
    }


def test_the_cases_cover_every_field_are_seeded_and_each_changes_a_saved_file(tmp_path):
    import copy

    from fasttrain.run import checkpoint
    from tests.fuzzcases import SCALARS, all_cases

    state = small_state()
    cases = all_cases(state, seed=7)
    ids = [case.id for case in cases]
    assert ids == [case.id for case in all_cases(state, seed=7)]  # the seed says which
    assert ids != [case.id for case in all_cases(state, seed=8)]  # positions are drawn
    for name in state["env"]:  # every env-state array, hostile values and random contents
        assert f"env.{name}=random" in ids and sum(i.startswith(f"env.{name}[") for i in ids) >= 1
    rng_zero = next(case for case in cases if case.id.startswith("env.rng[") and "=0" in case.id)
    assert rng_zero.refuse == ("resume",)  # a zero word must be refused, not run
    for counter in ("global_step", "iteration"):
        assert {f"{counter}={label}" for label in SCALARS} <= set(ids)
    assert "config:model.hidden=1000000000" in ids and "identity.obs_shape=65 dims" in ids
    before = _saved(tmp_path / "base.pt", state).read_bytes()
    for n, case in enumerate(cases):  # not a no-op, and written by fasttrain's own writer
        changed = copy.deepcopy(state)
        case.apply(changed)
        path = _saved(tmp_path / f"{n}.pt", changed)
        assert path.read_bytes() != before, case.id
        checkpoint.read_state(path)  # its checksum holds: only its values are hostile


def _saved(path, state):
    from fasttrain.run import checkpoint

    checkpoint.save(path, state)
    return path


def test_the_population_cases_cover_every_field_and_form(tmp_path):
    """Each population.json member field has hostile values, each changes the file, and every
    command case names the options it runs with."""
    import json as json_

    from tests.fuzzpopulation import FIELD_VALUES, command_args, command_cases, file_cases

    entry = {"dir": "seed-1", "seed": 1, "sets": []}
    assert set(FIELD_VALUES) == set(entry)  # every field population.json's reader takes
    base = json_.dumps({"members": [{"dir": "seed-0", "seed": 0, "sets": []}, entry]})
    for n, case in enumerate(file_cases()):
        folder = tmp_path / str(n)
        (folder / "seed-0").mkdir(parents=True)
        (folder / "seed-1").mkdir()
        (folder / "seed-0" / "checkpoint.pt").write_bytes(b"0")
        (folder / "seed-1" / "checkpoint.pt").write_bytes(b"1")
        (folder / "population.json").write_text(base)
        case.apply(folder)
        after = [(p.name, p.is_symlink()) for p in sorted(folder.iterdir())]
        changed = (folder / "population.json").read_bytes() != base.encode()
        assert (
            changed
            or after != [("population.json", False), ("seed-0", False), ("seed-1", False)]
            or ((folder / "seed-1" / "checkpoint.pt").read_bytes() == b"0")
        ), case.id
    for case in command_cases():
        args = command_args(case.id, "pqn")
        assert args[0] == "--seeds" and all("ppo." not in a for a in args), case.id

"""A population is as safe as a solo run: every value it reads from its members' checkpoints and
its ``population.json`` is checked (one line naming the member), nothing it names escapes its
folder or writes through a link, a live member is locked, a stop between two members' writes
leaves a population that resumes exactly, and what it is handed is applied or refused."""

from __future__ import annotations

import json
import math
import shutil
import signal
import time

import pytest
import torch

from fasttrain.run import checkpoint, rundir
from tests.cli import cli_in_process, finish, one_line, sets, start_cli

SIZES = sets(
    "game.cartpole.ppo.num_envs=4",
    "game.cartpole.ppo.num_steps=8",
    "game.cartpole.ppo.num_minibatches=2",
    "model.hidden=16",
    "log.progress=false",
    "log.curves=false",
    "run.compile=off",
    "run.checkpoint_interval=1",
)
STEPS = 64  # two iterations of 4 x 8 per member


CARTPOLE = ("run", "--game", "cartpole")


def population(out, *extra, steps=STEPS, seeds="0-1"):
    args = ("--seeds", seeds, "--steps", steps, "--out", out, *SIZES, *extra)
    result = cli_in_process(*CARTPOLE, *args)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished population of two tiny CartPole members (seeds 0 and 1)."""
    return population(tmp_path_factory.mktemp("base") / "pop")


def copy_of(base, tmp_path):
    out = tmp_path / "pop"
    shutil.copytree(base, out, ignore=shutil.ignore_patterns(".lock"))
    return out


def resume(out, *extra, steps=STEPS + 32):
    return cli_in_process("run", "--resume", out, "--steps", steps, *extra)


def member_state(out, name, change):
    state = checkpoint.read_state(out / name)
    change(state)
    checkpoint.save(out / name / checkpoint.FILENAME, state)


def _fill(path, value):
    def change(state):
        node = state
        for key in path[:-1]:
            node = node[key]
        node[path[-1]].view(-1)[0] = value

    return change


def _replace(key, make):
    return lambda state: state.__setitem__(key, make(state[key]))


HOSTILE = {  # a member's state changed one way, and the refusal's words
    "nan weight": (_fill(("model", "actor.weight"), math.nan), "model.actor.weight"),
    "1e30 weight": (_fill(("model", "actor.weight"), 1e30), "finite weights within"),
    "extra weight": (
        lambda s: s["model"].__setitem__("extra", torch.zeros(2)),
        "model.extra",
    ),
    "adam step -5": (_fill(("optimizer", "state", 0, "step"), -5), "step count >= 0"),
    "adam moment nan": (_fill(("optimizer", "state", 0, "exp_avg"), math.nan), "exp_avg ="),
    "negative moment": (_fill(("optimizer", "state", 0, "exp_avg_sq"), -1.0), "values >= 0"),
    "torch_rng size": (_replace("torch_rng", lambda t: t[:100]), "torch_rng ="),
    "generator shape": (_replace("generator", lambda t: t.reshape(2, -1)), "generator ="),
    "next_obs dtype": (_replace("next_obs", lambda t: t.double()), "next_obs ="),
    "starts byte 2": (
        lambda s: s["next_episode_starts"].view(torch.uint8).__setitem__(0, 2),
        "true or false",
    ),
    "iteration 1e9": (lambda s: s.__setitem__("iteration", 10**9), "iteration = 1000000000"),
    "written on cuda": (lambda s: s.__setitem__("device", "cuda"), "written on device 'cuda'"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_member_value_is_refused_in_one_line_naming_the_member(base, tmp_path, case):
    out = copy_of(base, tmp_path)
    change, words = HOSTILE[case]
    member_state(out, "seed-1", change)
    line = one_line(resume(out))
    assert line.startswith(f"Error: population {out}, member seed-1: "), line
    assert words in line, line


def _copied_over(out):
    shutil.copy(out / "seed-0" / checkpoint.FILENAME, out / "seed-1" / checkpoint.FILENAME)


def _seed_in_file(out):
    data = json.loads((out / "population.json").read_text())
    data["members"][1]["seed"] = 7
    (out / "population.json").write_text(json.dumps(data))


def _pqn_member(out, pqn):
    shutil.rmtree(out / "seed-1")
    shutil.copytree(pqn / "seed-1", out / "seed-1", ignore=shutil.ignore_patterns(".lock"))


def _linked(out, tmp_path):
    victim = tmp_path / "victim"
    shutil.move(out / "seed-1", victim)
    (out / "seed-1").symlink_to(victim)
    return victim


def test_a_member_holding_another_members_or_learners_checkpoint_is_refused(base, tmp_path):
    out = copy_of(base, tmp_path)
    _copied_over(out)  # two members would train the same weights
    assert "member seed-1: its checkpoint was written with run.seed = 0" in one_line(resume(out))
    out = copy_of(base, tmp_path / "b")
    _seed_in_file(out)
    assert "population.json gives this member seed 7" in one_line(resume(out))
    pqn = tmp_path / "pqn"
    sizes = sets("game.cartpole.pqn.num_envs=4", "game.cartpole.pqn.num_steps=8")
    made = cli_in_process(
        *CARTPOLE,
        "--algo",
        "pqn",
        "--seeds",
        "0-1",
        "--steps",
        STEPS,
        "--out",
        pqn,
        *sizes,
        *sets("model.hidden=16", "log.curves=false"),
    )
    assert made.returncode == 0, made.stderr
    out = copy_of(base, tmp_path / "c")
    _pqn_member(out, pqn)
    assert "written by learner 'pqn' and this population trains 'ppo'" in one_line(resume(out))


def test_a_member_folder_that_is_a_link_is_never_written_through(base, tmp_path):
    out = copy_of(base, tmp_path)
    victim = _linked(out, tmp_path)
    before = {p.name: p.read_bytes() for p in victim.iterdir()}
    line = one_line(resume(out))
    assert f"member seed-1: {out / 'seed-1'} is a symbolic link" in line, line
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before


@pytest.mark.parametrize(
    "text, words",
    [
        ("[" * 100_000 + "]" * 100_000, "nests its values too deep"),
        ('{"members": 5}', "'members' must be a list"),
        ('{"members": [{"dir": "../x", "seed": 0, "sets": []}]}', "'../x' is not a member"),
        ('{"members": [{"dir": "a\\\\b", "seed": 0, "sets": []}]}', "is not a member"),
        ('{"members": [{"dir": "x", "seed": true, "sets": []}]}', "seed True is not a seed"),
        ('{"members": [{"dir": "x", "seed": 0, "sets": [5]}]}', "list of KEY=VALUE"),
        ("not json", "is not a population's file"),
    ],
)
def test_population_json_is_checked_as_any_state_file(base, tmp_path, text, words):
    out = copy_of(base, tmp_path)
    (out / "population.json").write_text(text)
    line = one_line(resume(out))
    assert words in line, line


def test_population_json_beyond_the_member_cap_is_refused_before_any_member_is_read(tmp_path):
    out = tmp_path / "pop"
    out.mkdir()
    members = [{"dir": f"m{i}", "seed": i, "sets": []} for i in range(300)]
    (out / "population.json").write_text(json.dumps({"members": members}))
    assert "300 members; at most 256" in one_line(resume(out))


def test_vary_values_name_folders_by_their_parsed_values_inside_the_population(tmp_path):
    """A TOML comment in a --vary value (``#/../../victim``) is not part of any name."""
    out = tmp_path / "a" / "b" / "pop"
    population(out, "--vary", "ppo.gamma=0.99 #,0.98 #/../../victim", steps=32)
    names = sorted(p.name for p in out.iterdir() if p.name != ".lock")
    assert names == ["population.json"] + [
        f"seed-{s}-gamma-{g}" for s in (0, 1) for g in ("0.98", "0.99")
    ]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_dir()) == sorted(
        ["a", "b", "pop", *names[1:]]
    )
    vary = ("--vary", 'ppo.gamma=0.9,"../x"')
    bad = cli_in_process(*CARTPOLE, "--seeds", "0", *vary, "--out", tmp_path / "other", *SIZES)
    assert "'\"../x\"' is not a value a member's folder can be named by" in one_line(bad)
    assert not (tmp_path / "other").exists()


def test_settings_on_a_population_resume_are_applied_or_refused_as_a_solo_runs(base, tmp_path):
    out = copy_of(base, tmp_path)
    result = resume(out, "--set", "ppo.learning_rate=0.5")
    assert result.returncode == 0, result.stderr
    for name in ("seed-0", "seed-1"):
        saved = checkpoint.saved_config(out / name, checkpoint.load(out / name))
        assert saved.learner.learning_rate == 0.5
    fixed = resume(out, "--set", "game.cartpole.ppo.num_envs=8", steps=STEPS + 64)
    assert "member seed-0: checkpoint ppo.num_envs = 4, this run has 8" in one_line(fixed)
    seeded = resume(out, "--set", "run.seed=5", steps=STEPS + 64)
    assert "run.seed = 5 on --resume" in one_line(seeded)


def test_a_seed_setting_beside_seeds_is_refused_like_seed(tmp_path):
    args = (*CARTPOLE, "--seeds", "0-1", "--out", tmp_path / "p", *SIZES)
    line = one_line(cli_in_process(*args, "--set", "run.seed=5"))
    assert line == "Error: --set run.seed: --seeds gives every member its seed; drop run.seed"
    (tmp_path / "c.toml").write_text("[run]\nseed = 3\n")
    line = one_line(cli_in_process(*args, "--config", tmp_path / "c.toml"))
    assert "[run] seed: --seeds gives every member its seed" in line
    assert not (tmp_path / "p").exists()


def weights(folder):
    return checkpoint.read_state(folder)["model"]


def test_a_live_population_is_locked_and_a_kill_between_two_writes_resumes_exactly(tmp_path):
    """Held inside member 1's second write (member 0 already at the new step): no run may
    write into the population's folder or a member's while it lives; killed there (-9), the
    population continues from the step every member holds, whole, and ends as the
    uninterrupted one."""
    straight = population(tmp_path / "straight", steps=96)
    out = tmp_path / "pop"
    env = {rundir.PAUSE_BEFORE_RENAME: f"{checkpoint.FILENAME}:4"}  # member 1's second write
    args = [*CARTPOLE, "--seeds", "0-1", "--steps", 96, "--out", out, *SIZES]
    proc = start_cli(*args, env=env)
    try:
        deadline = time.monotonic() + 120
        # member 0's second write is done (its previous checkpoint kept), member 1's held
        while not (
            (out / "seed-0" / checkpoint.PREVIOUS).exists()
            and list((out / "seed-1").glob(".checkpoint.pt.*.tmp"))
        ):
            assert proc.poll() is None and time.monotonic() < deadline, "no fourth write"
            time.sleep(0.02)
        solo = [*CARTPOLE, "--steps", STEPS, *SIZES]
        for attempt, folder in [
            (["run", "--resume", out / "seed-0", "--steps", 96], out / "seed-0"),
            ([*solo, "--out", out / "seed-1"], out / "seed-1"),
            ([*CARTPOLE, "--seeds", "0-1", "--out", out / "seed-0", *SIZES], out / "seed-0"),
            ([*solo, "--out", out], out),
        ]:
            line = one_line(cli_in_process(*attempt))
            assert f"run directory {folder} is in use" in line, line
    finally:
        proc.send_signal(signal.SIGKILL)
        finish(proc)
    steps = [checkpoint.read_state(out / m)["global_step"] for m in ("seed-0", "seed-1")]
    assert steps == [64, 32]  # the members' newest checkpoints disagree
    line = one_line(cli_in_process(*CARTPOLE, "--out", out, *SIZES))
    assert f"{out} already holds a run" in line  # a population's folder, the process gone
    resumed = resume(out, steps=96)
    assert resumed.returncode == 0, resumed.stderr
    assert "continuing every member from step 32" in resumed.stdout
    for name in ("seed-0", "seed-1"):
        ours, theirs = weights(out / name), weights(straight / name)
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), name


def test_two_sigterms_end_a_population_with_143(tmp_path):
    """The second SIGTERM lands while the stopped population finishes (after its last line):
    the documented exit, not death by the signal."""
    args = ["run", "--game", "cartpole", "--seeds", "0-1", "--steps", 10**7, "--out"]
    proc = start_cli(*args, tmp_path / "pop", *SIZES, "--set", "log.interval_s=0.1")
    assert proc.stdout.readline().startswith("fasttrain: population of 2")
    proc.stdout.readline()  # a progress line: the loop runs
    proc.send_signal(signal.SIGTERM)
    for line in proc.stdout:
        if line.startswith("interrupted (SIGTERM)"):
            proc.send_signal(signal.SIGTERM)
            break
    assert finish(proc).returncode == 143


@pytest.mark.parametrize("text", ["not json", "[" * 100_000 + "]" * 100_000])
def test_a_finished_runs_damaged_summary_is_reported_not_a_traceback(tmp_path, text):
    out = tmp_path / "solo"
    made = cli_in_process(*CARTPOLE, "--steps", 32, "--out", out, *SIZES)
    assert made.returncode == 0, made.stderr
    (out / "summary.json").write_text(text)
    again = resume(out, steps=32)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert f"warning: {out / 'summary.json'} is unreadable" in again.stdout
    assert (out / "summary.json").read_text() == text

"""``fasttrain run --seeds`` (``fasttrain/run/population.py``, trained by the runner's one
loop): a population's run directory,
its members' directories as normal runs, its exact resume, a member stopped alone, and one-line
refusals."""

import csv
import dataclasses
import importlib.util
import json

import pytest
import torch

from fasttrain.errors import ConfigError
from fasttrain.learners.population import members_of
from fasttrain.learners.ppo import Trainer
from fasttrain.run import checkpoint
from fasttrain.run.population import parse_seeds, plan_members
from fasttrain.run.runner import run
from tests.cli import cli_in_process
from tests.conftest import small_snake

SETS = ["game.snake.height=6", "game.snake.width=6", "game.snake.ppo.num_envs=16"]
SETS += ["game.snake.ppo.num_steps=8", "model.hidden=16", "log.progress=false"]
SETS += ["run.compile=off", "run.amp=off"]
TINY = [arg for item in SETS for arg in ("--set", item)]
PopulationTrainer = members_of(Trainer)  # what `run --seeds` trains with PPO


def members(config, seeds):
    """A plain population's members of ``config``, each with its config."""
    out = []
    for m in plan_members(seeds):
        run_section = dataclasses.replace(config.run, seed=m.seed)
        out.append(dataclasses.replace(m, config=dataclasses.replace(config, run=run_section)))
    return out


def rows(folder):
    with open(folder / "metrics.csv") as f:
        return [
            {k: v for k, v in row.items() if not k.startswith("time") and k != "sps"}
            for row in csv.DictReader(f)
        ]


def test_parse_seeds_reads_lists_and_ranges_and_refuses_the_rest_in_one_line():
    assert parse_seeds("0,1,2") == (0, 1, 2)
    assert parse_seeds("0-3, 10") == (0, 1, 2, 3, 10)
    for text, words in [
        ("1,x", "'x' is not a seed or a range"),
        ("3-1", "'3-1' runs backwards"),
        ("-2", "'-2' is not a seed or a range"),
        ("1,2,1", "seed 1 twice"),
        ("0-999", "1,000 members; at most 256"),
        ("", "'' is not a seed"),
        ("\u0663", "is not a seed or a range"),  # an Arabic-Indic three: int() would take it
        ("+1", "'\\+1' is not a seed"),
        ("1e3", "'1e3' is not a seed"),
        ("0-", "'0-' is not a seed"),
        ("0--1", "'0--1' is not a seed"),
        ("18446744073709551616", "not a seed in \\[0, 2\\*\\*64\\)"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_seeds(text)


def test_seed_ranges_are_counted_before_any_list_is_built():
    """``--seeds 0-100000000`` is refused by arithmetic: no 10^8-long list (3.8 GiB) first."""
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(ConfigError, match="100,000,001 members; at most 256"):
        parse_seeds("0-100000000")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_a_population_writes_one_normal_run_directory_per_member(tmp_path):
    out = tmp_path / "pop"
    result = cli_in_process("run", "--seeds", "3,7", "--steps", "400", "--out", str(out), *TINY)
    assert result.returncode == 0, result.stderr
    assert "population of 2 (seeds 3, 7)" in result.stdout
    population = json.loads((out / "population.json").read_text())
    assert population["seeds"] == [3, 7]
    assert [m["dir"] for m in population["members"]] == ["seed-3", "seed-7"]
    assert population["worst_score"] <= population["median_score"]
    for seed in (3, 7):
        folder = out / f"seed-{seed}"
        state = checkpoint.load(folder)
        config = checkpoint.saved_config(folder, state)
        assert config.run.seed == seed and state["learner"] == "ppo"
        assert int(rows(folder)[-1]["global_step"]) == state["global_step"] == 384
        assert json.loads((folder / "summary.json").read_text())["global_step"] == 384
    # a member directory is a normal run: eval, play and plot read it, --resume continues it
    evaluated = cli_in_process("eval", "--run", str(out / "seed-7"), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    played = cli_in_process("play", "--checkpoint", str(out / "seed-7"), "--steps", "3")
    assert played.returncode == 0, played.stderr
    if importlib.util.find_spec("matplotlib") is not None:  # the plot extra
        png = tmp_path / "members.png"
        runs = (str(out / "seed-3"), str(out / "seed-7"))
        plotted = cli_in_process("plot", *runs, "--out", str(png))
        assert plotted.returncode == 0 and "2 runs" in plotted.stdout, plotted.stderr
        assert png.read_bytes().startswith(b"\x89PNG")
    alone = cli_in_process("run", "--resume", str(out / "seed-3"), "--steps", "600")
    assert alone.returncode == 0, alone.stderr
    assert int(rows(out / "seed-3")[-1]["global_step"]) == 512


def test_a_resumed_population_continues_as_the_uninterrupted_one_bit_for_bit(tmp_path):
    whole, part = tmp_path / "whole", tmp_path / "part"
    # a constant rate: an annealed one depends on the planned total, which --steps changes
    args = ("--seeds", "1-2", *TINY, "--set", "game.snake.ppo.anneal_lr=false")
    assert cli_in_process("run", *args, "--steps", "600", "--out", str(whole)).returncode == 0
    assert cli_in_process("run", *args, "--steps", "300", "--out", str(part)).returncode == 0
    resumed = cli_in_process("run", "--resume", str(part), "--steps", "600")
    assert resumed.returncode == 0, resumed.stderr
    for seed in (1, 2):
        assert rows(part / f"seed-{seed}") == rows(whole / f"seed-{seed}")
        a = checkpoint.load(part / f"seed-{seed}")["model"]
        b = checkpoint.load(whole / f"seed-{seed}")["model"]
        for name, value in b.items():
            assert torch.equal(torch.as_tensor(a[name]), torch.as_tensor(value)), name


def test_a_member_that_diverges_stops_alone_and_keeps_its_last_good_checkpoint(
    tmp_path, monkeypatch
):
    """Member 1's weights turn NaN after two iterations: its NaN guard stops it alone (its
    checkpoint of iteration 2 kept), the other member trains to the end."""
    real = PopulationTrainer.iterate

    def iterate(self):
        if self.iteration == 2:
            with torch.no_grad():
                for p in self.network.stacked.parameters():
                    p[1].fill_(float("nan"))
        return real(self)

    monkeypatch.setattr(PopulationTrainer, "iterate", iterate)
    config = small_snake(
        run={"amp": "off", "checkpoint_interval": 1, "nan_patience": 2},
        game={"snake": {"ppo": {"total_timesteps": 1024}}},
    )
    lines = []
    run(config, out=tmp_path / "pop", echo=lines.append, members=members(config, (4, 5)))
    assert any("member seed-5 stopped:" in line for line in lines), lines
    kept = checkpoint.load(tmp_path / "pop" / "seed-5")
    assert kept["iteration"] == 2
    assert checkpoint.load(tmp_path / "pop" / "seed-4")["global_step"] == 1024
    summary = json.loads((tmp_path / "pop" / "seed-5" / "summary.json").read_text())
    assert summary["stopped_alone"] is True


def test_a_pqn_population_writes_member_directories_that_resume_as_solo_pqn_runs(tmp_path):
    """--algo pqn --seeds: each member a normal PQN run directory (its checkpoint in the solo
    PQN form, read by eval and continued alone by --resume), the whole population resumed."""
    out = tmp_path / "pop"
    tiny = [item.replace(".ppo.", ".pqn.") for item in TINY]
    args = ("--algo", "pqn", "--seeds", "0-1", *tiny, "--set", "game.snake.pqn.num_minibatches=4")
    result = cli_in_process("run", *args, "--steps", "256", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "population of 2 (seeds 0, 1) on snake | pqn |" in result.stdout
    for seed in (0, 1):
        state = checkpoint.load(out / f"seed-{seed}")
        assert state["learner"] == "pqn" and state["global_step"] == 256
        assert "losses/td_loss" in rows(out / f"seed-{seed}")[-1]
    evaluated = cli_in_process("eval", "--run", str(out / "seed-1"), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    resumed = cli_in_process("run", "--resume", str(out), "--steps", "512")
    assert resumed.returncode == 0, resumed.stderr
    assert all(checkpoint.load(out / f"seed-{s}")["global_step"] == 512 for s in (0, 1))
    alone = cli_in_process("run", "--resume", str(out / "seed-0"), "--steps", "640")
    assert alone.returncode == 0, alone.stderr
    assert int(rows(out / "seed-0")[-1]["global_step"]) == 640


def test_a_member_whose_on_row_ends_it_stops_alone_as_finished_and_the_others_go_on(tmp_path):
    """``on_row`` per member (a sweep's trial at its target): member 0 ends at its second row,
    its checkpoint and summary there, marked stopped early; member 1 trains to the end."""
    steps = {"snake": {"ppo": {"total_timesteps": 1024}}}
    config = small_snake(run={"amp": "off"}, game=steps, log={"csv_every": 1})
    seen, times = [[], []], [[], []]

    def watch(k, stop_at):
        def on_row(row):
            seen[k].append(row["global_step"])
            times[k].append(row["time_s"])
            return len(seen[k]) == stop_at

        return on_row

    out = tmp_path / "pop"
    watches = [watch(0, 2), watch(1, None)]
    run(config, out=out, echo=lambda *a: None, on_row=watches, members=members(config, (4, 5)))
    assert len(seen[0]) == 2 and seen[1][-1] == 1024 and len(seen[1]) > 2
    # one clock for the population: at a boundary every member's row reads the same training
    # seconds, so a budget on them ends every member there
    assert times[0] == times[1][:2]
    ended = checkpoint.load(out / "seed-4")
    assert ended["global_step"] == seen[0][-1] == int(rows(out / "seed-4")[-1]["global_step"])
    summary = json.loads((out / "seed-4" / "summary.json").read_text())
    assert summary["stopped_early"] is True and summary["stopped_alone"] is False
    assert summary["global_step"] == seen[0][-1]  # where it ended, not where the others did
    assert checkpoint.load(out / "seed-5")["global_step"] == 1024
    assert json.loads((out / "seed-5" / "summary.json").read_text())["stopped_early"] is False


def test_a_population_whose_every_member_stopped_ends_in_one_error(tmp_path, monkeypatch):
    from fasttrain.errors import RunError

    real = PopulationTrainer.iterate

    def iterate(self):
        with torch.no_grad():
            for p in self.network.stacked.parameters():
                p.fill_(float("nan"))
        return real(self)

    monkeypatch.setattr(PopulationTrainer, "iterate", iterate)
    config = small_snake(run={"amp": "off", "nan_patience": 2})
    with pytest.raises(RunError, match="every member stopped on non-finite updates"):
        run(config, out=tmp_path / "pop", echo=print, members=members(config, (0, 1)))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--seeds", "0-1", "--seed", "3"], "--seeds gives every member its seed; drop --seed"),
        (["--seeds", "0-1", "--set", "game.snake.ppo.overlap=true"], "ppo.overlap = false"),
        (["--seeds", "0,zero"], "'zero' is not a seed or a range"),
        (["--seeds", "0-1", "--nproc", "2"], "--seeds trains its members in one process"),
    ],
)
def test_bad_population_commands_get_one_line_before_any_work(tmp_path, args, words):
    out = tmp_path / "pop"
    result = cli_in_process("run", *args, "--out", str(out), *TINY)
    assert result.returncode != 0 and words in result.stderr, result.stderr
    assert not out.exists()


def test_an_occupied_directory_and_a_resume_with_other_seeds_are_refused(tmp_path):
    out = tmp_path / "pop"
    made = cli_in_process("run", "--seeds", "0-1", "--steps", "200", "--out", str(out), *TINY)
    assert made.returncode == 0
    again = cli_in_process("run", "--seeds", "0-1", "--out", str(out), *TINY)
    assert "already holds a run; continue it with --resume" in again.stderr
    other = cli_in_process("run", "--resume", str(out), "--seeds", "2")
    assert "continues its population's own members; drop --seeds" in other.stderr


def test_variants_train_one_member_per_seed_and_value_and_resume(tmp_path):
    """--vary makes a grid over the seeds: each member's directory, config and optimizer hold
    its own value; the population resumes with each member's own config."""
    out = tmp_path / "grid"
    args = ("--seeds", "0-1", "--vary", "ppo.learning_rate=0.01,0.001", *TINY)
    args += ("--set", "game.snake.ppo.anneal_lr=false")
    result = cli_in_process("run", *args, "--steps", "256", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "population of 4 (seeds 0, 1; 2 variants each)" in result.stdout
    names = [m["dir"] for m in json.loads((out / "population.json").read_text())["members"]]
    assert names == [f"seed-{s}-learning_rate-{v}" for s in (0, 1) for v in ("0.01", "0.001")]
    for name in names:
        state = checkpoint.load(out / name)
        config = checkpoint.saved_config(out / name, state)
        want = float(name.rpartition("-")[2])
        assert config.learner.learning_rate == want and config.run.seed == int(name[5])
        assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(want, rel=1e-6)
    resumed = cli_in_process("run", "--resume", str(out), "--steps", "384")
    assert resumed.returncode == 0, resumed.stderr
    for name in names:
        assert int(rows(out / name)[-1]["global_step"]) == 384


@pytest.mark.parametrize(
    "args, words",
    [
        (["--seeds", "0", "--vary", "ppo.num_envs=8,16"], "--vary 'ppo.num_envs=8,16': vary one"),
        (["--seeds", "0", "--vary", "pqn.num_minibatches=2,4"], "pqn.start_e, pqn.end_e"),
        (["--seeds", "0", "--vary", "ppo.learning_rate"], "as KEY=V1,V2"),
        (["--seeds", "0", "--vary", "ppo.ent_coef=0.1,0.1"], "give distinct values"),
        (["--seeds", "0", "--vary", "ppo.ent_coef=x,y"], "ppo.ent_coef must be float"),
        (["--vary", "ppo.ent_coef=0.1,0.2"], "--vary needs --seeds"),
    ],
)
def test_bad_variants_get_one_line_before_any_work(tmp_path, args, words):
    out = tmp_path / "grid"
    result = cli_in_process("run", *args, "--out", str(out), *TINY)
    assert result.returncode != 0 and words in result.stderr, result.stderr
    assert not out.exists()

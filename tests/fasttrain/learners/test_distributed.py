"""Data-parallel runs on torchrun with 2 CPU ranks (gloo): identical weights and optimizer
state, distinct experience, one run directory, bit-identical resume, no hang on a lost rank."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fasttrain.learners import distributed
from fasttrain.learners.ranks import Ranks
from fasttrain.run import checkpoint
from tests.cli import ROOT, cli_in_process, sets

PPO_SETS = sets(
    "game.cartpole.ppo.num_envs=16",
    "game.cartpole.ppo.num_steps=16",
    "game.cartpole.ppo.num_minibatches=2",
    "game.cartpole.ppo.anneal_lr=false",  # the same schedule in the half run
)
SETS = ["--game", "cartpole"] + sets(
    "model.hidden=16",
    "log.curves=false",
    "log.progress=false",
    "run.dist_timeout_s=30",
    "run.compile=off",  # not the runs of 10**9 steps that stand for "until stopped"
)
STEPS_PER_ITERATION = 16 * 16 * 2  # envs x steps x ranks
# the tests of the four two-rank runs (``runs``: 48 s of the default tier's four minutes on two
# cores) run in the slow tier; the default tier keeps torchrun's failure paths and statistics
SLOW = pytest.mark.slow
VOLATILE = ("time_s", "sps")  # columns that depend on timing


def launch(*args, nproc: int = 2, learner: list = PPO_SETS) -> subprocess.Popen:
    """``python -m fasttrain run --nproc N ...`` (the shortcut that execs torchrun), with the
    ``learner``'s settings (PPO's; another learner's section is refused)."""
    command = [sys.executable, "-m", "fasttrain", "run", "--nproc", str(nproc), *args, *SETS]
    command += learner
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv") as f:
        return [
            {k: v for k, v in row.items() if k not in VOLATILE and not k.startswith("time/")}
            for row in csv.DictReader(f)
        ]


def same_tensors(a, b) -> bool:
    """Nested dicts / lists of tensors equal, element for element."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_tensors(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A straight 2-rank run of 8 iterations, one stopped at 4 then resumed to 8, and DQN."""
    root = tmp_path_factory.mktemp("dist")
    total = str(8 * STEPS_PER_ITERATION)
    straight = launch("--steps", total, "--out", str(root / "straight"))
    half = launch("--steps", str(4 * STEPS_PER_ITERATION), "--out", str(root / "resumed"))
    results = {"straight": finish(straight), "half": finish(half)}
    resume = launch("--resume", str(root / "resumed"), "--steps", total)
    learning = sets("game.cartpole.dqn.learning_starts=1024")
    dqn = launch(
        "--algo", "dqn", "--steps", total, "--out", str(root / "dqn"), *learning, learner=[]
    )
    results["resume"], results["dqn"] = finish(resume), finish(dqn)
    for name, result in results.items():
        if result.returncode != 0:  # the whole stderr: a rank's own last words come before
            pytest.fail(f"the {name} run exited {result.returncode}:\n{result.stderr[-8000:]}")
    return root, results


@SLOW
def test_ranks_keep_identical_weights_and_optimizer_state_but_play_their_own_games(runs):
    root, results = runs
    state = checkpoint.load(root / "straight")
    (other,) = state["rank_states"]  # rank 1's state, gathered to rank 0
    assert state["iteration"] == other["iteration"] == 8
    assert same_tensors(state["model"], other["model"])
    assert same_tensors(state["optimizer"], other["optimizer"])
    assert state["optimizer"]["state"], "the optimizer stepped"
    assert not same_tensors(state["next_obs"], other["next_obs"])  # distinct experience
    assert not same_tensors(state["env"]["rng"], other["env"]["rng"])
    assert not same_tensors(state["generator"], other["generator"])
    assert state["identity"]["world_size"] == 2


@SLOW
def test_dqn_ranks_keep_identical_online_and_target_networks(runs):
    root, _ = runs
    state = checkpoint.load(root / "dqn")
    (other,) = state["rank_states"]
    for key in ("model", "target_model", "optimizer"):
        assert same_tensors(state[key], other[key]), key
    assert state["global_step"] == 8 * STEPS_PER_ITERATION
    assert not same_tensors(state["env"], other["env"])


def _episode_stats_worker(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    ranks = Ranks(rank=rank, world=2, local_rank=rank, local_world=2)
    mine = [
        {"episodes": 3, "return": 2.0, "length": 10.0, "score": 1.0},
        {"episodes": 1, "return": 6.0, "length": 30.0, "score": 5.0},
    ][rank]
    results[rank] = distributed.episode_stats(mine, ranks, "cpu")
    # a rank without episodes still takes part; none anywhere gives {}
    results[rank + 2] = distributed.episode_stats({} if rank else mine, ranks, "cpu")
    results[rank + 4] = distributed.episode_stats({}, ranks, "cpu")
    torch.distributed.destroy_process_group()


def test_episode_statistics_average_every_ranks_episodes():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_episode_stats_worker, args=(port, results), nprocs=2, join=True)
    both = {"episodes": 4, "return": 3.0, "length": 15.0, "score": 2.0}  # (3*2 + 6) / 4 ...
    assert results[0] == results[1] == both
    assert results[2] == results[3] == {"episodes": 3, "return": 2.0, "length": 10.0, "score": 1.0}
    assert results[4] == results[5] == {}


@SLOW
def test_one_run_directory_and_metrics_over_both_ranks(runs):
    root, results = runs
    files = sorted(p.name for p in (root / "straight").iterdir())
    assert files == [".lock", "checkpoint.pt", "config.toml", "metrics.csv", "summary.json"]
    table = rows(root / "straight")
    steps = [int(r["global_step"]) for r in table]
    assert steps == [STEPS_PER_ITERATION * (i + 1) for i in range(8)]  # both ranks' steps
    output = results["straight"].stdout
    assert output.count("fasttrain: cartpole on ") == 1  # rank 0 alone prints
    assert "per rank x 2 ranks" in output


@SLOW
def test_a_resumed_two_rank_run_equals_the_straight_one(runs):
    root, _ = runs
    assert rows(root / "resumed") == rows(root / "straight")
    a, b = checkpoint.load(root / "straight"), checkpoint.load(root / "resumed")
    assert same_tensors(a["model"], b["model"])
    assert same_tensors(a["rank_states"][0]["model"], b["rank_states"][0]["model"])
    assert same_tensors(a["rank_states"][0]["next_obs"], b["rank_states"][0]["next_obs"])


@SLOW
def test_resuming_with_another_rank_count_fails_in_one_line(runs):
    root, _ = runs
    # one rank, so no torchrun: in this process
    done = cli_in_process("run", "--resume", root / "resumed", cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: checkpoint was written by 2 ranks and this run has 1; resume it with --nproc 2 "
        "(torchrun)"
    ]


def worker_pids(parent: int) -> dict[int, int]:
    """rank -> pid of torchrun's workers under ``parent``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        ranks = [v for v in environ if v.startswith(b"RANK=")]
        if ppid == parent and ranks:
            found[int(ranks[0][5:])] = int(entry.name)
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_rank_that_dies_stops_the_whole_run_within_seconds(tmp_path):
    proc = launch("--steps", str(10**9), "--out", str(tmp_path / "run"))
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "run" / "metrics.csv").exists() or len(rows(tmp_path / "run")) < 2:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.2)
        workers = worker_pids(proc.pid)
        assert sorted(workers) == [0, 1]
        os.kill(workers[1], signal.SIGKILL)
        killed = time.monotonic()
        result = finish(proc, timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result.returncode != 0
    assert took < 30, f"the run took {took:.0f} s to stop"


RAISE_ON_RANK_1 = """\
import os
if os.environ.get("RANK") == "1":  # only torchrun's rank 1: its third iteration raises
    from fasttrain.learners import ppo

    original, calls = ppo.Trainer.iterate, []

    def iterate(self):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected failure on rank 1")
        return original(self)

    ppo.Trainer.iterate = iterate
"""


def test_a_rank_that_raises_stops_the_whole_run_within_seconds(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(RAISE_ON_RANK_1)  # loaded by every Python started
    command = [sys.executable, "-m", "fasttrain", "run", "--nproc", "2", *SETS]
    command += ["--steps", str(10**9), "--out", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)])}
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    took = time.monotonic() - start
    assert done.returncode == 1
    assert "Error: rank 1: injected failure on rank 1" in done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    assert took < 60, f"{took:.0f} s"  # start-up (~15 s) included; no collective timeout
    assert len(rows(tmp_path / "run")) == 2  # rank 0 logged two iterations, then lost rank 1


def test_rank_seeds_are_distinct_and_rank_zero_keeps_the_seed():
    assert distributed.rank_seed(7, 0) == 7
    seeds = {distributed.rank_seed(7, r) for r in range(64)}
    assert len(seeds) == 64 and all(0 <= s < 2**64 for s in seeds)
    assert distributed.rank_seed(7, 3) == distributed.rank_seed(7, 3) != distributed.rank_seed(8, 3)

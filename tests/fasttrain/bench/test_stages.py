"""fasttrain.bench.stages: what each stage measures and the rows, notes and skips it makes.
Most stages run with their timings replaced (never asserting a speed); a few run for real at
tiny sizes."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import time

import pytest

from fasttrain.bench import measure, stages
from fasttrain.bench.report import Results, machine_info, report, target_run
from fasttrain.bench.stages import targets_stage
from fasttrain.config import resolve as cfg
from fasttrain.errors import RunError
from tests.fasttrain.bench.plans import cartpole_plan, env_plan, target_plan, train_plan


def test_the_compile_stage_times_a_cold_then_a_warm_first_step(tmp_path):
    plan = dataclasses.replace(env_plan("cartpole", ("cpu",)), compile_times=True)
    results = Results()
    stages.compile_stage(plan, results, str(tmp_path / "cache"))
    assert not results.skipped, results.skipped
    (compiled,) = results.compiles
    assert (compiled["game"], compiled["backend"]) == ("cartpole", "cpu")
    assert compiled["cold_first_step_s"] > 0 and compiled["warm_first_step_s"] > 0


def test_target_stage_times_cartpole_and_sb3_and_reports_them(tmp_path, capsys):
    budget, target = 20.0, 25.0  # a random policy's mean return is about 22
    plan = target_plan(
        tmp_path,
        target_games={"cartpole": ("return", (target,))},
        sb3_target=target if importlib.util.find_spec("stable_baselines3") else None,
        target_budget_s={"cartpole": budget, "sb3": budget},
    )
    results = Results()
    targets_stage(plan, results)
    assert not results.skipped, results.skipped
    ours = results.targets[0]
    assert (ours["game"], ours["learner"], ours["metric"], ours["target"]) == (
        "cartpole",
        "ppo",
        "return",
        target,
    )
    (run,) = ours["runs"]
    assert run["reached"] and run["ended"] == "target" and run["seed"] == 0
    assert 0 < ours["seconds_median"] == run["seconds"] <= run["train_s"] <= budget + 5
    assert ours["steps_median"] == run["steps"] > 0
    assert ours["seeds_reached"] == 1 and run["best"] >= target
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert "time to target" in out and "median s" in out and "vs SB3" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["results"] == [] and data["targets"][0]["seconds_median"] == run["seconds"]
    if plan.sb3_target is None:
        return
    sb3 = results.targets[1]
    assert (sb3["game"], sb3["learner"], sb3["target"]) == ("CartPole-v1", "sb3-ppo", target)
    assert sb3["seeds_reached"] == 1 and 0 < sb3["seconds_median"] <= budget + 5
    expected = sb3["seconds_median"] / ours["seconds_median"]
    assert data["targets"][0]["speedup_vs_sb3"] == pytest.approx(expected)
    assert f"{expected:.1f}x faster" in out or f"{1 / expected:.1f}x slower" in out


def test_a_target_not_reached_in_the_budget_reads_not_reached(tmp_path, capsys, monkeypatch):
    # CartPole's default 150k steps can end inside 1 s on a fast CPU (~200k steps/s): given
    # 10**9, only the budget ends the run (eager: so long a run would compile under "auto")
    build = cfg.build
    endless = (
        "test",
        {"game": {"cartpole": {"ppo": {"total_timesteps": 10**9}}}, "run": {"compile": "off"}},
    )
    monkeypatch.setattr(cfg, "build", lambda layers: build([*layers, endless]))
    plan = target_plan(
        tmp_path,
        target_games={"cartpole": ("return", (1e6,))},  # above CartPole's 500
        sb3_target=None,
        target_budget_s={"cartpole": 1.0},
    )
    results = Results()
    targets_stage(plan, results)
    (row,) = results.targets
    (run,) = row["runs"]
    assert not run["reached"] and run["seconds"] is None and run["ended"] == "budget"
    assert 1.0 <= run["train_s"] < 10 and run["total_steps"] > 0
    assert row["seconds_median"] is None and row["steps_median"] is None
    assert row["seeds_reached"] == 0 and 0 < row["best"] <= 500
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert f"not reached in 1 s (best {row['best']:.3g})" in out
    assert json.loads((tmp_path / "bench.json").read_text())["targets"][0]["seconds_median"] is None


@pytest.mark.parametrize("backends", [("cpu",), ("python", "cpu"), ("python",)])
def test_env_stage_adds_the_pufferlib_arena_row_on_cpu(monkeypatch, backends):
    calls = []

    def fake_bench_env(game, backend, num_envs, repeats, seconds, seed=0, params=None):
        calls.append((game, backend, num_envs, params))
        return [100.0, 300.0, 200.0], 4096 * num_envs

    monkeypatch.setattr(stages, "bench_env", fake_bench_env)
    results = Results()
    stages.env_stage(env_plan("arena", backends), results, "arena")
    sweep = [(b, 4, None) for b in backends]
    puffer = [("cpu", 4, stages.PUFFER_ARENA)] if "cpu" in backends else []
    assert [c[1:] for c in calls] == sweep + puffer
    assert all(c[0] == "arena" for c in calls)
    assert len(results.rows) == len(calls)
    for row in results.rows[: len(sweep)]:
        assert row["note"] == "random actions, agent-steps/s (8 agents per env)"
    if puffer:
        row = results.rows[-1]
        assert (row["game"], row["kind"], row["backend"], row["num_envs"]) == (
            "arena",
            "env",
            "cpu",
            4,
        )
        assert "PufferLib" in row["note"] and "256 snakes" in row["note"]
        assert row["sps_median"] == 200.0 and row["mem_bytes"] == 4096 * 4
    assert stages.PUFFER_ARENA["num_snakes"] == 256  # PufferLib's Ocean Snake settings
    assert (stages.PUFFER_ARENA["width"], stages.PUFFER_ARENA["height"]) == (640, 360)


def test_env_stage_single_agent_game_has_no_extra_row(monkeypatch):
    calls = []

    def fake_bench_env(game, backend, num_envs, repeats, seconds, seed=0, params=None):
        calls.append(params)
        return [1.0], 1

    monkeypatch.setattr(stages, "bench_env", fake_bench_env)
    results = Results()
    stages.env_stage(env_plan("snake", ("cpu",)), results, "snake")
    assert calls == [None]
    (row,) = results.rows
    assert row["note"] == "random actions"  # env-steps: no agents note


@pytest.mark.parametrize(
    "backends, sizes", [(("cpu",), stages.QUICK_SWEEP["python"]), (("python", "cpu"), [4])]
)
def test_peer_rows_are_sized_like_the_python_rows_even_without_them(monkeypatch, backends, sizes):
    """--backend cpu leaves the python rows out; the Gymnasium peer rows keep their sizes."""
    pytest.importorskip("gymnasium")
    timed = []
    monkeypatch.setattr(stages, "bench_gymnasium", lambda n, *a: timed.append(n) or [1.0])
    monkeypatch.setattr(stages, "bench_sb3", lambda *a: [1.0])
    results = Results()
    stages.peer_stage(env_plan("cartpole", backends), results)
    assert timed == list(sizes)
    assert [r["num_envs"] for r in results.rows if r["backend"] == "gymnasium-sync"] == sizes


def test_minatar_games_get_the_minatar_package_as_their_peer_row(monkeypatch):
    """The baseline stage of a MinAtar game also times the package it was ported from (a real
    short timing: its steps are counted), and its env rows say how many times faster they are."""
    pytest.importorskip("minatar")
    from fasttrain.bench.report import add_speedups

    calls = []
    real = measure.time_repeats
    monkeypatch.setattr(
        measure,
        "time_repeats",
        lambda run, steps, *a, **k: calls.append(steps) or real(run, steps, *a, **k),
    )
    results = Results()
    stages.baseline_stage(env_plan("minatar-breakout", ("cpu",)), results, "minatar-breakout")
    baseline, peer = results.rows
    assert (peer["kind"], peer["backend"], peer["num_envs"]) == ("peer", "minatar", 1)
    assert calls == [1, 1] and peer["sps_median"] > 0
    env = dict(baseline, kind="env", backend="cpu", sps_median=peer["sps_median"] * 250, note="x")
    rows = [baseline, peer, env]
    add_speedups(rows)
    assert env["speedup_vs_peer"] == pytest.approx(250) and env["note"].endswith(
        "250x the minatar package"
    )
    snake = Results()
    monkeypatch.setattr(stages, "bench_baseline", lambda *a: [1.0])
    stages.baseline_stage(env_plan("snake", ("cpu",)), snake, "snake")
    assert [r["kind"] for r in snake.rows] == ["baseline"]


def test_training_stage_adds_a_recurrent_ppo_row_beside_the_feed_forward_one(
    tmp_path, capsys, monkeypatch
):
    from fasttrain import device as devices

    monkeypatch.setattr(devices, "cpp_compiler", lambda: None)  # the PufferLib row stays eager
    plan = train_plan(tmp_path)
    results = Results()
    stages.training_stage(plan, results, "cartpole")
    assert not results.skipped, results.skipped
    keys = [(r["kind"], r["algo"], r["core"], r["settings"]) for r in results.rows]
    assert len(set(keys)) == len(keys)  # no two rows share kind, algo, core and settings
    # the default config's rows (CartPole also has a row at PufferLib's settings)
    rows = {k[:3]: r for k, r in zip(keys, results.rows, strict=True) if k[3] == "default"}
    ff, lstm = rows["train", "ppo", "none"], rows["train", "ppo", "lstm"]
    assert ("ceiling", "ppo", "lstm") in rows and ("ceiling", "ppo", "none") in rows
    assert results.rows.index(lstm) > results.rows.index(rows["train", "dqn", "none"])
    for row in (ff, lstm):
        assert math.isfinite(row["sps_median"]) and row["sps_median"] > 0
        assert row["num_envs"] == 8 and row["game"] == "cartpole"
    assert ff["note"].startswith("ppo: env ") and lstm["note"].startswith("ppo+lstm: env ")
    assert rows["ceiling", "ppo", "lstm"]["note"].startswith("ppo+lstm: learner only")
    report(plan, results, machine_info(1), time.perf_counter())
    out = capsys.readouterr().out
    assert "ppo: env " in out and "ppo+lstm: env " in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["settings"]["cores"] == ["lstm"]
    trains = [
        (r["algo"], r["core"], r["settings"]) for r in data["results"] if r["kind"] == "train"
    ]
    puffer, overlapped = (row[0] for row in stages.EXTRA_TRAIN_ROWS["cartpole"])
    assert trains == [
        ("ppo", "none", "default"),
        ("dqn", "none", "default"),
        ("pqn", "none", "default"),
        ("ppo", "lstm", "default"),
        ("ppo", "none", puffer),
        ("ppo", "none", overlapped),
    ]


def test_a_core_the_config_does_not_fit_is_skipped_in_one_line(tmp_path, monkeypatch):
    from fasttrain.learners import LEARNERS

    # cartpole's 16-step rollout does not split into sequences of 5 steps
    ppo = dataclasses.replace(LEARNERS["ppo"], bench={"bptt_horizon": 5})
    monkeypatch.setitem(LEARNERS, "ppo", ppo)
    results = Results()
    stages.train_rows(train_plan(tmp_path), results, "cartpole", "ppo", "lstm")
    assert results.rows == []
    (skip,) = results.skipped
    assert skip["what"] == "train cartpole ppo+lstm"
    assert "bptt_horizon" in skip["reason"] and "\n" not in skip["reason"]


def test_cartpole_has_a_row_at_pufferlibs_settings(monkeypatch, tmp_path):
    """The extra CartPole row trains PufferLib's sizes, its note and JSON name them, and
    ``--train-num-envs`` does not resize it (it does the default row)."""
    from fasttrain import device as devices

    monkeypatch.setattr(devices, "cpp_compiler", lambda: None)  # eager: no compile in a test
    sizes = dict(repeats=1, seconds=0.05, train_iterations=1, train_num_envs=8)
    plan = cartpole_plan(
        tmp_path, quick=False, json_path=None, targets=False, targets_only=False, cores=(), **sizes
    )
    results = Results()
    stages.training_stage(plan, results, "cartpole")
    quick = Results()  # --quick leaves the row at other settings out
    stages.training_stage(dataclasses.replace(plan, quick=True), quick, "cartpole")
    assert {r["settings"] for r in quick.rows} == {"default"}
    trains = {r["settings"]: r for r in results.rows if r["kind"] == "train" and r["algo"] == "ppo"}
    names = [row[0] for row in stages.EXTRA_TRAIN_ROWS["cartpole"]]  # synchronous, overlapped
    assert set(trains) == {"default", *names}
    for name in names:
        puffer = trains.pop(name)
        assert (puffer["num_envs"], puffer["batch_size"]) == (1024, 65_536)
        assert "PufferLib" in puffer["note"] and "(num_envs set)" not in puffer["note"]
    assert trains["default"]["num_envs"] == 8 and "(num_envs set)" in trains["default"]["note"]
    ceilings = [r for r in results.rows if r["kind"] == "ceiling" and "PufferLib" in r["note"]]
    assert len(ceilings) == 2 and all(c["num_envs"] == 1024 for c in ceilings)


# ------------------------------------------------------------------------------- by hand


def fake_runs(*figures):
    """benchmark_training results: (sps, ceiling_sps) per repeat, the same split each time."""
    split = {"time_env": 0.5, "time_forward": 0.25, "time_learn": 0.125, "time_other": 0.125}
    return [
        {
            "sps": sps,
            "ceiling_sps": ceiling,
            **split,
            "num_envs": 8,
            "batch_size": 128,
            "gpu_mem_bytes": None,
            "core": "none",
        }
        for sps, ceiling in figures
    ]


def test_the_train_and_ceiling_rows_are_the_medians_of_the_repeats(tmp_path):
    plan = train_plan(tmp_path, cores=())
    runs = fake_runs((100.0, 400.0), (300.0, 200.0), (200.0, 800.0))
    train = stages.training_row(plan, "cartpole", "cpu", "ppo", "none", "", 8, runs)
    assert (train["sps_median"], train["sps_min"], train["sps_max"]) == (200.0, 100.0, 300.0)
    assert train["note"] == "ppo: env 50% fwd 25% learn 12% other 12% (num_envs set)"
    assert (train["algo"], train["core"], train["settings"]) == ("ppo", "none", "default")
    assert train["time_env"] == 0.5 and train["batch_size"] == 128 and train["iterations"] == 1
    ceiling = stages.ceiling_row("cartpole", "cpu", train, runs, "")
    assert ceiling["sps_median"] == 400.0 and ceiling["fraction_reached"] == 0.5
    assert ceiling["note"] == "ppo: learner only; training reaches 50%"
    assert (ceiling["kind"], ceiling["num_envs"], ceiling["settings"]) == ("ceiling", 8, "default")
    # a preset's core names the row; an extra row at other settings names them
    lstm = [dict(r, core="lstm") for r in runs]
    named = stages.training_row(plan, "cartpole", "cpu", "ppo", "none", "big", None, lstm)
    assert named["note"] == "ppo+lstm: env 50% fwd 25% learn 12% other 12%; big"
    assert named["core"] == "lstm" and named["settings"] == "big"
    assert stages.ceiling_row("cartpole", "cpu", named, lstm, "big")["note"].startswith("ppo+lstm")
    nan = fake_runs((100.0, math.nan))  # a learner without a ceiling
    assert stages.ceiling_row("cartpole", "cpu", train, nan, "") is None


def test_train_rows_skips_a_missing_learner_and_fails_on_a_broken_one(tmp_path, monkeypatch):
    plan = train_plan(tmp_path, cores=())

    def missing(*args, **kwargs):
        raise ImportError("no module named x")

    monkeypatch.setattr(stages, "bench_train", missing)
    results = Results()
    stages.train_rows(plan, results, "cartpole", "dqn", "gru")
    assert results.rows == [] and results.skipped == [
        {
            "what": "train cartpole dqn+gru",
            "reason": "benchmark_training for dqn not available (no module named x)",
        }
    ]

    def broken(*args, **kwargs):
        raise ValueError("first line\nsecond line")

    monkeypatch.setattr(stages, "bench_train", broken)
    with pytest.raises(RunError) as info:
        stages.train_rows(plan, Results(), "cartpole", "ppo", settings=("big", {"ppo": {}}))
    assert str(info.value) == "train cartpole (big) failed: ValueError: first line"


def test_train_rows_passes_the_plan_and_an_extra_row_keeps_its_own_size(tmp_path, monkeypatch):
    calls = []

    def fake(algo, game, device, iterations, repeats, num_envs, seed, threads, **kwargs):
        calls.append((algo, game, device, iterations, repeats, num_envs, seed, threads, kwargs))
        return fake_runs((1.0, 2.0))

    monkeypatch.setattr(stages, "bench_train", fake)
    plan = dataclasses.replace(train_plan(tmp_path, cores=()), seed=5)
    results = Results()
    stages.train_rows(plan, results, "cartpole", "ppo", "lstm")
    stages.train_rows(plan, results, "cartpole", "ppo", settings=("big", {"ppo": {"a": 1}}))
    assert calls == [
        ("ppo", "cartpole", "cpu", 1, 1, 8, 5, 1, {"core": "lstm", "sections": None}),
        (
            "ppo",
            "cartpole",
            "cpu",
            1,
            1,
            None,
            5,
            1,
            {"core": "none", "sections": {"ppo": {"a": 1}}},
        ),
    ]
    assert [r["kind"] for r in results.rows] == ["train", "ceiling"] * 2


def test_compile_failures_are_skip_notes_and_python_is_never_compiled(tmp_path, monkeypatch):
    calls = []

    def fake(game, backend, cache, threads):
        calls.append((game, backend, cache, threads))
        if game == "snake":
            raise RuntimeError("the compile process failed")
        return {"cold_first_step_s": 2.0, "warm_first_step_s": 1.0}

    monkeypatch.setattr(stages, "bench_compile", fake)
    plan = cartpole_plan(
        tmp_path, game_names=("snake", "cartpole"), backend_names=("python", "cpu")
    )
    results = Results()
    stages.compile_stage(plan, results, "CACHE")
    assert calls == [("snake", "cpu", "CACHE", 1), ("cartpole", "cpu", "CACHE", 1)]
    assert results.compiles == [
        {"game": "cartpole", "backend": "cpu", "cold_first_step_s": 2.0, "warm_first_step_s": 1.0}
    ]
    assert results.skipped == [
        {"what": "compile snake cpu", "reason": "the compile process failed"}
    ]


def test_env_stage_caps_the_python_sweep_and_notes_cuda_buffers(monkeypatch):
    calls = []

    def fake_bench_env(game, backend, num_envs, repeats, seconds, seed=0, params=None):
        calls.append((backend, num_envs))
        return [1.0], 3 * 2**20

    monkeypatch.setattr(stages, "bench_env", fake_bench_env)
    plan = dataclasses.replace(
        env_plan("snake", ("python",)),
        backends=["python", "cuda"],
        sweep={"python": [4, stages.PYTHON_MAX_ENVS + 1], "cuda": [16]},
    )
    results = Results()
    stages.env_stage(plan, results, "snake")
    assert calls == [("python", 4), ("cuda", 16)]
    (skip,) = results.skipped
    assert skip["what"] == f"env snake python num_envs={stages.PYTHON_MAX_ENVS + 1}"
    assert results.rows[1]["note"] == "random actions, 3 MiB of GPU buffers"


def test_the_targets_stage_says_why_a_game_has_no_rows(tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(stages, "time_to_target", lambda *a: called.append(a))
    plan = cartpole_plan(tmp_path, game_names=("snake", "arena"))  # quick: snake left out
    results = Results()
    targets_stage(plan, results)
    assert results.targets == [] and called == []
    assert results.skipped == [
        {
            "what": "targets snake",
            "reason": "left out with --quick: each run takes minutes (run without --quick)",
        },
        {"what": "targets arena", "reason": "no target is set for arena"},
    ]
    off = Results()
    targets_stage(cartpole_plan(tmp_path, game_names=("arena",), targets=False), off)
    assert off.skipped == [] and off.targets == []


def test_the_targets_stage_makes_a_row_per_value_over_the_seeds(tmp_path, monkeypatch):
    seen = []

    def fake(config, metric, values, budget):
        seed = config.run.seed
        seen.append((config.game.name, seed, metric, values, budget))
        return [  # seed 3 reaches 10 in 1 s and 20 in 2 s; seed 4 reaches 10 in 5 s only
            target_run(seed, 1.0 if seed == 3 else 5.0, 100, 25.0, 20.0, 6.0, 1000, "target"),
            target_run(seed, 2.0 if seed == 3 else None, 200, 25.0, 20.0, 6.0, 1000, "budget"),
        ]

    monkeypatch.setattr(stages, "time_to_target", fake)
    plan = target_plan(
        tmp_path,
        games=["snake"],
        target_games={"snake": ("score", (10.0, 20.0))},
        target_budget_s={"snake": 5.0},
        sb3_target=None,
        seed=3,
    )
    plan = dataclasses.replace(plan, target_seeds=2)
    results = Results()
    targets_stage(plan, results)
    assert seen == [("snake", s, "score", (10.0, 20.0), 5.0) for s in (3, 4)]
    ten, twenty = results.targets
    assert (ten["target"], ten["seeds"], ten["seeds_reached"]) == (10.0, [3, 4], 2)
    assert ten["seconds_median"] == 3.0 and twenty["seconds_median"] is None  # 2 s and never
    assert twenty["seeds_reached"] == 1 and ten["learner"] == "ppo"
    assert ten["note"].startswith("default config: ") and "at most 5 s or " in ten["note"]


def test_a_failed_target_run_is_a_skip_and_sb3_still_runs(tmp_path, monkeypatch):
    def broken(*args):
        raise ValueError("no such thing")

    sb3 = []
    monkeypatch.setattr(stages, "target_config", broken)
    monkeypatch.setattr(stages, "sb3_target_stage", lambda plan, results, seeds: sb3.append(seeds))
    plan = dataclasses.replace(target_plan(tmp_path, sb3_target=475.0, seed=7), target_seeds=2)
    results = Results()
    targets_stage(plan, results)
    assert results.targets == []
    assert results.skipped == [
        {"what": "targets cartpole", "reason": "the run failed: ValueError('no such thing')"}
    ]
    assert sb3 == [[7, 8]]


@pytest.mark.parametrize("mode", ["targets_only", "quick", "compile_times"])
def test_run_stages_runs_the_stages_in_order_on_the_cache_their_timings_need(
    tmp_path, monkeypatch, mode
):
    """With the compile times measured, every stage after them reuses the new cache those
    filled, removed at the end; without them (``--quick``, ``--targets-only``) every stage runs
    on the user's usual cache, warm from earlier runs."""
    order, caches = [], []

    def stage(name):
        def run(plan, results, *rest):
            order.append((name, *rest[:1]))
            caches.append(os.environ.get("FASTTRAIN_CACHE_DIR"))
            if name == "compile_stage":
                filled.append(rest[0])
                assert os.path.isdir(rest[0])

        return run

    filled = []
    names = ("compile_stage", "env_stage", "baseline_stage", "training_stage", "peer_stage")
    for name in (*names, "targets_stage"):
        monkeypatch.setattr(stages, name, stage(name))
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", "/the/users/cache")
    plan = cartpole_plan(
        tmp_path,
        game_names=("snake", "cartpole"),
        targets_only=mode == "targets_only",
        quick=mode != "compile_times",
    )
    results = stages.run_stages(plan)
    assert os.environ["FASTTRAIN_CACHE_DIR"] == "/the/users/cache"  # given back
    if mode == "targets_only":
        assert order == [("targets_stage",)] and caches == ["/the/users/cache"]
        assert results.skipped == []
        return
    assert [o for o in order if o[0] != "compile_stage"] == [
        ("env_stage", "snake"),
        ("baseline_stage", "snake"),
        ("training_stage", "snake"),
        ("env_stage", "cartpole"),
        ("baseline_stage", "cartpole"),
        ("training_stage", "cartpole"),
        ("peer_stage",),
        ("targets_stage",),
    ]
    if mode == "quick":
        assert set(caches) == {"/the/users/cache"} and filled == []
        assert [s["what"] for s in results.skipped] == ["compile"]  # --quick: no compile times
        return
    (cache,) = filled
    assert order[0][0] == "compile_stage" and caches[1:] == [cache] * (len(caches) - 1)
    assert cache != "/the/users/cache" and not os.path.exists(cache)  # removed at the end
    monkeypatch.delenv("FASTTRAIN_CACHE_DIR")
    stages.run_stages(plan)
    assert "FASTTRAIN_CACHE_DIR" not in os.environ

"""fasttrain.bench.report: rows, speedups, tables and files, against hand-computed figures
(nothing is timed here)."""

from __future__ import annotations

import json
import math

import click
import pytest

from fasttrain.bench.report import (
    Results,
    add_sb3_speedups,
    add_speedups,
    check_figures,
    compile_table,
    finite_or_none,
    format_table,
    gpu_memory_note,
    human,
    make_row,
    make_target_row,
    reached_text,
    report,
    results_table,
    seed_spread,
    target_run,
    targets_table,
    write_json,
)
from tests.fasttrain.bench.plans import cartpole_plan


def test_seed_spread_is_the_median_with_unreached_seeds_as_infinitely_slow():
    assert seed_spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert seed_spread([4.0, 1.0, 2.0, 10.0])["median"] == 3.0
    assert seed_spread([5.0, None, 1.0]) == {"median": 5.0, "min": 1.0, "max": None}
    assert seed_spread([None, None, 1.0]) == {"median": None, "min": 1.0, "max": None}


def test_a_row_is_the_median_min_and_max_of_its_repeats():
    row = make_row("snake", "env", "cpu", 64, [3.0, 1.0, 2.0, 10.0], "note", mem_bytes=5)
    assert (row["sps_median"], row["sps_min"], row["sps_max"]) == (2.5, 1.0, 10.0)
    assert row["repeats"] == 4 and row["num_envs"] == 64 and row["mem_bytes"] == 5
    assert row["speedup_vs_baseline"] is None and row["note"] == "note"


def test_figures_json_cannot_hold_become_none():
    assert [finite_or_none(x) for x in (None, math.nan, math.inf, -math.inf)] == [None] * 4
    assert finite_or_none(3) == 3.0 and isinstance(finite_or_none(3), float)


def test_a_target_row_spreads_its_seeds_and_keeps_the_best_value():
    runs = [
        target_run(0, 2.0, 100, 480.0, 470.0, 2.5, 1000, "target"),
        target_run(1, None, None, 212.0, 200.0, 60.0, 5000, "budget"),
        target_run(2, 4.0, 300, 500.0, 499.0, 4.5, 1200, "target"),
    ]
    assert not runs[1]["reached"] and runs[1]["seconds"] is None and runs[0]["reached"]
    row = make_target_row("cartpole", "ppo", "return", 475, 60, runs)
    # seconds 2, 4 and an unreached seed (infinitely slow): median 4, max not a number
    assert (row["seconds_median"], row["seconds_min"], row["seconds_max"]) == (4.0, 2.0, None)
    assert (row["steps_median"], row["steps_min"], row["steps_max"]) == (300, 100, None)
    assert row["seeds"] == [0, 1, 2] and row["seeds_reached"] == 2 and row["best"] == 500.0
    assert row["target"] == 475.0 and row["budget_s"] == 60.0 and row["speedup_vs_sb3"] is None
    never = make_target_row("cartpole", "ppo", "return", 475, 60, [runs[1], runs[1]])
    assert never["seconds_median"] is None and never["seeds_reached"] == 0


def test_speedups_are_over_the_baseline_of_the_same_game():
    rows = [
        make_row("snake", "baseline", "python", 1, [10.0]),
        make_row("snake", "env", "cpu", 64, [50.0], "random actions"),
        make_row("snake", "train", "cpu", 64, [20.0]),
        make_row("snake", "peer", "other", 1, [5.0]),
        make_row("arena", "env", "cpu", 64, [70.0]),  # no baseline of its own
    ]
    add_speedups(rows)
    assert [r["speedup_vs_baseline"] for r in rows] == [None, 5.0, 2.0, None, None]
    # a peer of the game (the package it was ported from): its env rows say how many times
    assert rows[1]["speedup_vs_peer"] == 10.0 and rows[1]["note"].endswith("10x the other package")
    assert "speedup_vs_peer" not in rows[2] and "speedup_vs_peer" not in rows[4]


def test_sb3_speedups_need_both_to_reach_the_same_target():
    def row(game, learner, target, seconds, **extra):
        return {
            "game": game,
            "learner": learner,
            "metric": "return",
            "target": target,
            "seconds_median": seconds,
            "speedup_vs_sb3": None,
            **extra,
        }

    ours, slow, other = (
        row("cartpole", "ppo", 475.0, 10.0),
        row("cartpole", "ppo", 475.0, None),
        (row("cartpole", "ppo", 400.0, 10.0)),
    )
    sb3 = row("CartPole-v1", "sb3-ppo", 475.0, 30.0, sb3_game="cartpole")
    targets = [ours, slow, other, sb3]
    add_sb3_speedups(targets)
    assert ours["speedup_vs_sb3"] == 3.0
    assert slow["speedup_vs_sb3"] is other["speedup_vs_sb3"] is sb3["speedup_vs_sb3"] is None
    unreached = [row("cartpole", "ppo", 475.0, 10.0), dict(sb3, seconds_median=None)]
    add_sb3_speedups(unreached)
    assert unreached[0]["speedup_vs_sb3"] is None


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_figure_that_is_not_positive_and_finite_fails_in_one_line(bad):
    good = make_row("snake", "env", "cpu", 8, [1.0, 2.0])
    check_figures([good])
    broken = dict(good, sps_min=bad)
    with pytest.raises(click.ClickException, match="non-positive or non-finite figure"):
        check_figures([good, broken])


def test_human_figures_and_gpu_memory():
    assert [human(x) for x in (0.5, 999, 1234, 1_234_567, 2.5e9)] == [
        "0.5",
        "999",
        "1.23k",
        "1.23M",
        "2.5G",
    ]
    assert gpu_memory_note(None) == "" and gpu_memory_note(3 * 2**29) == ", 1.50 GiB GPU"


def test_tables_right_align_numbers_and_left_align_text():
    text = format_table(["game", "num_envs", "note"], [["snake", 8, "a"], ["cartpole", 4096, ""]])
    assert text.splitlines() == [
        "game      num_envs  note",
        "snake            8  a",
        "cartpole      4096",  # trailing spaces stripped
    ]
    rows = [make_row("snake", "env", "cpu", 8, [1500.0], "x")]
    rows[0]["speedup_vs_baseline"] = 12.345
    lines = results_table(rows).splitlines()
    assert lines[0].split() == [
        "game",
        "kind",
        "backend",
        "num_envs",
        "SPS",
        "median",
        "min",
        "max",
        "speedup",
        "note",
    ]
    assert lines[1].split() == ["snake", "env", "cpu", "8", "1.5k", "1.5k", "1.5k", "12.3x", "x"]
    compiled = {
        "game": "snake",
        "backend": "cpu",
        "cold_first_step_s": 12.345,
        "warm_first_step_s": 0.5,
        "warm_import_s": 1.25,
    }
    assert compile_table([compiled]).splitlines()[1].split()[:4] == [
        "snake",
        "cpu",
        "12.35",
        "0.50",
    ]


def target_row(seconds, ended="target", best=212.0, speedup=None):
    run = target_run(
        0, seconds, None if seconds is None else 1000, best, best, 60.0, 150_000, ended
    )
    row = make_target_row("cartpole", "ppo", "return", 475.0, 60.0, [run, run, run])
    return dict(row, speedup_vs_sb3=speedup)


def test_reached_text_says_what_was_reached_instead():
    assert reached_text(target_row(3.456)) == "3.46"
    assert reached_text(target_row(12.34)) == "12.3"
    assert reached_text(target_row(None, "budget")) == "not reached in 60 s (best 212)"
    assert (
        reached_text(target_row(None, "total_timesteps", best=None))
        == "not reached in 150k steps (best none)"
    )


def test_targets_table_says_faster_or_slower_than_sb3():
    rows = [target_row(2.0, speedup=2.0), target_row(2.0, speedup=0.5), target_row(None, "budget")]
    lines = targets_table(rows).splitlines()
    assert "2.0x faster" in lines[1] and "2.0x slower" in lines[2]
    assert lines[1].split()[2:7] == ["return", "475", "2.00", "1k", "3/3"]
    assert lines[3].split()[4:8] == ["not", "reached", "in", "60"] and " - " in lines[3]


def test_write_json_writes_atomically_and_a_missing_folder_is_one_line(tmp_path):
    path = tmp_path / "out.json"
    write_json(str(path), {"a": [1, 2.5, None]})
    assert json.loads(path.read_text()) == {"a": [1, 2.5, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left
    with pytest.raises(click.ClickException) as info:
        write_json(str(tmp_path / "missing" / "out.json"), {})
    assert "\n" not in info.value.message


def test_report_prints_and_writes_every_figure_with_its_speedups(tmp_path, capsys):
    plan = cartpole_plan(tmp_path)
    results = Results()
    results.rows += [
        make_row("cartpole", "baseline", "python", 1, [100.0]),
        make_row("cartpole", "env", "cpu", 256, [4000.0, 5000.0]),
    ]
    results.skip("compile", "left out")
    machine = {
        "cpu": "Test CPU",
        "cpu_count": 2,
        "cpu_affinity": 2,
        "gpu": None,
        "load_average_at_start": [1.5, 1.0, 1.0],
        "threads": {"numba": 1},
    }
    report(plan, results, machine, started=0.0)
    out = capsys.readouterr().out
    assert out.startswith("\nfasttrain bench on Test CPU (2 cores, 1 threads, GPU: none)")
    assert "45.0x" in out and "skipped compile: left out" in out
    assert "note: load average 1.5 at start" in out  # over half the 2 cores were busy
    assert f"wrote {plan.json_path}" in out and "time to target" not in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["results"][1]["speedup_vs_baseline"] == 45.0
    assert data["skipped"] == [{"what": "compile", "reason": "left out"}]
    assert data["settings"] == json.loads(json.dumps(plan.settings()))
    assert data["machine"]["cpu"] == "Test CPU" and "load_average_at_end" in data["machine"]

"""``.ci/gpu``'s stages (``fasttrain.bench.gpu_stages``): named, capped, the first five inside
one window's 8 minutes, each writing its JSON as it ends; the run stages run on the CPU path."""

from __future__ import annotations

import json

import pytest

from fasttrain.bench import gpu_stages
from tests.cli import ROOT


def test_the_first_five_stages_are_the_issues_and_fit_eight_minutes():
    first = [s.name for s in gpu_stages.STAGES if s.first]
    assert first == ["parity", "snake-run", "graph-tests", "costs", "population"]
    assert sum(s.cap_s for s in gpu_stages.STAGES if s.first) <= gpu_stages.FIRST_BUDGET_S
    assert [s.name for s in gpu_stages.choose("later")] == [
        "games",
        "time-to-score",
        "env-scale",
        "registers",
    ]
    assert [s.name for s in gpu_stages.choose("costs, parity")] == ["parity", "costs"]  # in order
    with pytest.raises(ValueError, match="unknown stage speed; valid: first, later, all or"):
        gpu_stages.choose("parity,speed")


def test_ci_gpu_runs_the_stages_from_this_tree_with_a_carried_numpy():
    script = (ROOT / ".ci" / "gpu").read_text()
    assert "python -m fasttrain.bench.gpu_stages" in script
    assert "pip install -q --no-index" in script and ".whl/numpy-" in script
    assert "pip install -q --no-deps --no-build-isolation -e ." not in script  # no reinstall


def test_the_run_stages_write_their_figures_on_the_cpu_path(tmp_path, capsys):
    code = gpu_stages.main(
        [
            "--stages",
            "snake-run,population",
            "--device",
            "cpu",
            "--steps",
            "40000",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr()
    run = json.loads((tmp_path / "gpu-snake-run.json").read_text())
    assert run["stage"] == "snake-run" and run["passed"] and run["cap_s"] == 120
    result = run["result"]
    assert result["exit"] == 0 and result["first_lines"][0].startswith("fasttrain: snake on cpu")
    assert set(result["seconds_to_score"]) == {"20", "40", "50"}
    (summary,) = result["summaries"].values()
    assert 0 < summary["global_step"] <= 40000  # whole iterations of the preset's batch
    population = json.loads((tmp_path / "gpu-population.json").read_text())["result"]
    assert population["exit"] == 0 and len(population["summaries"]) >= 8  # a member each
    assert "population" in " ".join(population["first_lines"]).lower() or population["summaries"]


def test_a_failed_stage_is_recorded_and_parity_stops_the_rest(tmp_path, monkeypatch):
    ran = []

    def fake(stage, device, steps, scratch):
        ran.append(stage.name)
        return {"exit": 1 if stage.name == "parity" else 0}

    monkeypatch.setattr(gpu_stages, "run_stage", fake)
    assert gpu_stages.main(["--stages", "first", "--out", str(tmp_path)]) == 1
    assert ran == ["parity"]  # wrong results would make every later figure meaningless
    assert json.loads((tmp_path / "gpu-parity.json").read_text())["passed"] is False
    ran.clear()
    assert gpu_stages.main(["--stages", "costs,population", "--out", str(tmp_path)]) == 0
    assert ran == ["costs", "population"]

"""TensorBoard and W&B receive exactly the metrics.csv rows; a missing extra fails first."""

import csv
import importlib.util
import math
from pathlib import Path

import pytest

from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.run import dashboards
from fasttrain.run.dashboards import CsvSink
from fasttrain.run.metrics import duration
from fasttrain.run.runner import run


def tiny(steps=2048, **log):
    return cfg.from_dict(
        {
            "game": {
                "name": "cartpole",
                "cartpole": {"ppo": {"total_timesteps": steps, "num_envs": 16, "num_steps": 16}},
            },
            "model": {"hidden": 16},
            "log": {"progress": False, "curves": False, **log},
        }
    )


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="no tensorboard")
def test_tensorboard_holds_the_metrics_csv_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    run(tiny(tensorboard=True), out=out, echo=lambda *_: None)
    table = rows(out)
    assert len(table) == 8  # 2048 steps in iterations of 256
    events = EventAccumulator(str(out / "tensorboard")).Reload()
    tags = set(events.Tags()["scalars"])
    assert tags == set(table[0]) - {"global_step"}
    for tag in tags:
        scalars = events.Scalars(tag)
        assert [s.step for s in scalars] == [int(r["global_step"]) for r in table], tag
        for scalar, row in zip(scalars, table, strict=True):
            assert same(scalar.value, float(row[tag])), (tag, scalar.value, row[tag])


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="no wandb")
def test_wandb_offline_writes_its_run_and_a_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    run(tiny(1024, wandb="offline", wandb_project="tests"), out=out, echo=lambda *_: None)
    run_id = (out / "wandb_id").read_text().strip()
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith(run_id)
    assert (runs[0] / f"run-{run_id}.wandb").stat().st_size > 0  # the logged history
    config = tiny(2048, wandb="offline", wandb_project="tests")
    run(config, resume=out, echo=lambda *_: None)
    assert (out / "wandb_id").read_text().strip() == run_id  # the same W&B run goes on
    # a folder per process, named by its start second and the run id (W&B appends "-1" to a
    # name already taken within the same second), each logging to the one run
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, runs
    assert all(run_id in r.name and (r / f"run-{run_id}.wandb").stat().st_size > 0 for r in runs)


@pytest.mark.parametrize("setting", [{"tensorboard": True}, {"wandb": "offline"}])
def test_a_missing_extra_fails_in_one_line_before_any_work(tmp_path, monkeypatch, setting):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("tensorboard", "wandb") else real(name, *a),
    )
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"pip install 'fasttrain\[(tensorboard|wandb)\]'") as e:
        run(tiny(**setting), out=out, echo=lambda *_: None)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_wandb_mode_is_checked():
    with pytest.raises(ConfigError, match="off, offline, online"):
        cfg.from_dict({"log": {"wandb": "cloud"}})
    assert dashboards.wanted(tiny(tensorboard=True, wandb="offline").log) == [
        "tensorboard",
        "wandb",
    ]
    assert dashboards.wanted(tiny().log) == []


@pytest.mark.parametrize(
    "seconds,text", [(0.4, "0s"), (42, "42s"), (187, "3m07s"), (3725, "1h02m"), (-5, "0s")]
)
def test_duration_reads_as_a_clock(seconds, text):
    assert duration(seconds) == text


def csv_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_csv_sink_writes_rows_and_a_resume_trims_those_past_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.csv"
    sink = CsvSink(path)
    for step in (100, 200, 300):
        sink.write({"global_step": step, "time_s": step / 100, "losses/x": step * 2})
    sink.close()
    assert [r["global_step"] for r in csv_rows(path)] == ["100", "200", "300"]
    # a kill mid-row left half a line; the checkpoint is at step 200
    with open(path, "a") as f:
        f.write("400,4.0")
    sink = CsvSink(path, resume_step=200)
    sink.write({"global_step": 300, "time_s": 3.5, "losses/x": 7, "losses/new": 1})
    sink.close()
    written = csv_rows(path)
    assert [r["global_step"] for r in written] == ["100", "200", "300"]
    assert written[-1] == {"global_step": "300", "time_s": "3.5", "losses/x": "7"}  # its columns
    assert path.read_text().count("global_step") == 1  # no second header
    # a fresh run (no resume) starts the file over
    CsvSink(path).close()
    assert path.read_text() == ""

"""``python -m fasttrain.bench.scale``: the thread sweep on any machine, the GPU goals where a
GPU is (.ci/gpu runs it there)."""

from __future__ import annotations

import functools
import json

import pytest

from fasttrain.bench import scale, training


def test_thread_counts_double_up_to_the_cores():
    assert scale.thread_counts(1) == [1]
    assert scale.thread_counts(2) == [1, 2]
    assert scale.thread_counts(6) == [1, 2, 4, 6]
    assert scale.thread_counts(16) == [1, 2, 4, 8, 16]


def test_the_sweep_writes_every_thread_count_and_says_what_it_could_not_measure(
    tmp_path, monkeypatch
):
    # eager training: what is checked is what the sweep writes, and the default config's
    # torch.compile (two of them, in the background) took ~6 s of this test's ~10
    eager = functools.partial(training.benchmark_training, sections={"run": {"compile": "off"}})
    monkeypatch.setattr(training, "benchmark_training", eager)
    path = tmp_path / "scale.json"
    args = ["--threads", "1", "--seconds", "0.05", "--iterations", "1", "--train-num-envs", "32"]
    assert scale.main(["--json", str(path), *args]) == 0
    data = json.loads(path.read_text())
    (row,) = data["threads"]["rows"]
    assert row["threads"] == 1 and row["env_sps"] > 0 and row["train_sps"] > 0
    assert data["threads"]["auto_vs_best"] > 0 and data["machine"]["cpu"]
    if data["gpu"] is None:
        assert "gpu" in data["skipped"]


def test_skipped_figures_are_not_measured_and_unknown_names_are_refused(tmp_path, capsys):
    path = tmp_path / "scale.json"
    assert scale.main(["--json", str(path), "--skip", "threads,env"]) == 0
    data = json.loads(path.read_text())
    assert "threads" not in data and "machine" in data
    try:
        scale.main(["--json", str(path), "--skip", "threads,speed"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("an unknown figure was accepted")
    assert "unknown --skip speed; valid: time_to_score" in capsys.readouterr().err


def test_gpu_goals_store_and_save_each_figure_as_it_comes(monkeypatch):
    """Each figure is in ``out`` when the save after it runs (a lease cut short keeps what was
    measured); the training figures once per mode (graph, eager); a failing figure is None with
    its reason under ``skipped``; skipped names are not run."""
    calls = []

    def fake(name, fail=False):
        def figure(*args, **kwargs):
            calls.append((name, args, kwargs))
            if fail:
                raise RuntimeError("out of memory\nmore")
            return {"from": name, "graph": kwargs.get("graph")}

        return figure

    for name in (
        "rollout_cost",
        "env_kernel_cost",
        "time_to_score",
        "gpu_busy_share",
        "population_cost",
    ):
        monkeypatch.setattr(scale, name, fake(name))
    monkeypatch.setattr(scale, "large_batch_sps", fake("large", fail=True))
    saved = []
    out, skipped = {}, {}
    games = ["cartpole", "snake"]
    skip = frozenset({"step_fixed_cost", "env", "compile", "registers"})
    scale.gpu_goals(games, skipped, 5.0, out, lambda: saved.append(json.dumps(out)), skip)
    assert set(out["rollout_cost"]) == {"snake", "cartpole"}
    assert out["rollout_cost"]["snake"]["graph"]["graph"] is True
    assert out["rollout_cost"]["snake"]["eager"]["graph"] is False
    assert out["time_to_score"]["minatar-breakout"]["eager"]["from"] == "time_to_score"
    assert out["population"]["minatar-breakout"]["from"] == "population_cost"
    assert out["ppo_large_batch"] == {
        "num_envs": scale.LARGE_BATCH_ENVS,
        "graph": None,
        "eager": None,
    }
    assert skipped == {
        "ppo_large_batch (graph)": "RuntimeError: out of memory",
        "ppo_large_batch (eager)": "RuntimeError: out of memory",
    }
    assert "step_fixed_cost_us" not in out and "registers" not in out
    assert len(saved) == len(calls) and '"snake"' in saved[0]
    assert json.loads(saved[-1]) == json.loads(json.dumps(out))


def test_the_population_figure_times_one_seed_against_a_population_of_them():
    """On the CPU (the figure runs on a GPU in .ci/gpu): CartPole's preset, one seed's
    iteration against a population of 2, each member taking the solo run's steps."""
    figure = scale.population_cost("cartpole", members=2, device="cpu", iterations=1)
    assert figure["members"] == 2 and figure["algo"] == "ppo"
    assert figure["time_ratio"] == pytest.approx(
        figure["population_iteration_ms"] / figure["solo_iteration_ms"]
    )
    assert figure["population_sps"] > 0 and figure["solo_sps"] > 0
    assert figure["gpu_busy"] is None


def test_the_env_figure_times_each_layout_the_cuda_backend_gives(monkeypatch):
    """``env_rate`` makes its envs under each layout (the default first, the backend's own
    layout given back after), for ``LAYOUT_GAMES``; the other games in the default alone; a
    layout whose envs do not fit keeps its one line."""
    from types import SimpleNamespace

    import fasttrain.kernels
    from fasttrain.bench import measure

    backend = SimpleNamespace(layout="obs-minor", spread=True)
    seen = []

    def bench_env(game, backend_name, num_envs, repeats, seconds):
        seen.append((game, backend.layout, num_envs))
        if backend.layout == "env-minor" and game == "minatar-breakout":
            raise MemoryError("the envs need more than the GPU has")
        return [2e6, 1e6, 3e6], 0

    monkeypatch.setattr(fasttrain.kernels, "get_backend", lambda name: backend)
    monkeypatch.setattr(measure, "bench_env", bench_env)
    snake = scale.env_rate("snake")
    assert [layout for _, layout, _ in seen] == ["obs-minor", "env-major", "env-minor"]
    assert seen[0][2] == scale.LARGE_ENVS and backend.layout == "obs-minor"
    assert snake["env_sps"] == 2e6 and snake["obs_gb_per_s"] == 2e6 * 576 / 1e9
    assert snake["layouts"]["env-major"] == {"env_sps": 2e6, "obs_gb_per_s": 2e6 * 576 / 1e9}
    breakout = scale.env_rate("minatar-breakout")
    assert breakout["layouts"]["env-minor"] == {"error": "the envs need more than the GPU has"}
    seen.clear()
    assert list(scale.env_rate("minatar-asterix")["layouts"]) == ["obs-minor"]
    assert [layout for _, layout, _ in seen] == ["obs-minor"]

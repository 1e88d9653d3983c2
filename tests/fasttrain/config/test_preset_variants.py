"""A game's preset may differ by machine class (``run.preset``): the variant is chosen from the
device and the CPU's class (faked here), laid over the game's base preset, beaten by ``--set``,
named on the run's first line and recorded in its config.toml, so that a resume on a machine of
another class continues with the same settings."""

from __future__ import annotations

import pytest

from fasttrain import device
from fasttrain.config import presets
from fasttrain.config import resolve as cfg
from tests.cli import cli_in_process, header

# what each machine class gets under run.preset = "auto"
BY_CLASS = {
    "amx": "base",
    "avx512-bf16": "base",
    "arm-bf16": "base",
    "avx512": "fp32",
    "avx2": "fp32",
    "neon": "fp32",
    "baseline": "fp32",
}


@pytest.fixture
def machine(monkeypatch):
    """``machine(cls, gpu=False)``: fake the CPU's class (and a GPU) for the config's choice."""
    monkeypatch.delenv("FASTTRAIN_CPU", raising=False)

    def fake(cls: str, gpu: bool = False):
        monkeypatch.setattr(device, "cpu_class", lambda: cls)
        monkeypatch.setattr(device, "device_type", lambda name: "cuda" if gpu else "cpu")

    return fake


def test_every_cpu_class_is_sorted_into_a_variant():
    assert set(BY_CLASS) == {name for name, _ in device.CPU_CLASSES} | {"baseline"}
    assert {c for c, v in BY_CLASS.items() if v == "base"} == set(device.BF16_CLASSES)


@pytest.mark.parametrize("cls", sorted(BY_CLASS))
def test_auto_picks_the_variant_by_the_machine_class_and_says_why(machine, cls):
    machine(cls)
    config = cfg.load()
    assert config.run.preset == BY_CLASS[cls]
    native = "native bf16" if BY_CLASS[cls] == "base" else "no native bf16"
    assert config.sources["run.preset"] == f"auto: CPU class {cls}, {native}"
    assert f"run.preset={BY_CLASS[cls]!r} (auto: CPU class {cls}" in ", ".join(config.overrides())
    machine(cls, gpu=True)  # a GPU run takes the GPU's variant whatever the CPU
    assert cfg.load().run.preset == "cuda"


def test_an_emulated_class_is_named_as_emulated(monkeypatch):
    monkeypatch.setenv("FASTTRAIN_CPU", "avx2")
    monkeypatch.setattr(device, "device_type", lambda name: "cpu")
    assert device.preset_variant("auto", "cpu") == (
        "fp32",
        "CPU class avx2 (FASTTRAIN_CPU), no native bf16",
    )


@pytest.fixture
def snake_fp32(monkeypatch):
    """A fp32 variant of Snake's preset: one update epoch and a narrower network."""
    table = {"ppo": {"update_epochs": 1}, "model": {"hidden": 64}}
    monkeypatch.setitem(presets.VARIANT_DEFAULTS["fp32"], "snake", table)
    return table


def test_a_variant_lays_its_tables_over_the_base_preset(machine, snake_fp32):
    base = presets.GAME_DEFAULTS["snake"]
    machine("avx2")
    fp32 = cfg.load()
    assert fp32.learner.update_epochs == 1 and fp32.model.hidden == 64
    assert fp32.sources["ppo.update_epochs"] == "snake fp32 preset"
    assert fp32.sources["model.hidden"] == "snake fp32 preset"
    # the rest of the base preset stays under it
    assert fp32.learner.learning_rate == base["ppo"]["learning_rate"]
    assert fp32.sources["ppo.learning_rate"] == "snake preset"
    machine("amx")
    amx = cfg.load()
    assert amx.learner.update_epochs == cfg.LEARNERS["ppo"].config().update_epochs
    assert amx.model.hidden == cfg.ModelConfig().hidden and "model.hidden" not in amx.sources
    # another game, with no fp32 table, trains its base preset on either class
    machine("avx2")
    breakout = cfg.from_dict({"game": {"name": "minatar-breakout"}})
    assert breakout.run.preset == "fp32"
    assert breakout.model.hidden == presets.GAME_DEFAULTS["minatar-breakout"]["model"]["hidden"]


def test_the_user_chooses_a_variant_and_set_beats_it(machine, snake_fp32):
    machine("amx")
    chosen = cfg.load(sets=["run.preset=fp32"])
    assert chosen.run.preset == "fp32" and chosen.learner.update_epochs == 1
    assert chosen.sources["run.preset"] == "--set"
    machine("avx2")
    assert cfg.load(sets=["run.preset=base"]).learner.update_epochs == 2
    over = cfg.load(sets=["ppo.update_epochs=3", "model.hidden=48"])
    assert over.run.preset == "fp32"
    assert (over.learner.update_epochs, over.model.hidden) == (3, 48)
    assert over.sources["ppo.update_epochs"] == "--set"
    valid = "run.preset must be one of auto, base, fp32, cuda; got .avx2."
    with pytest.raises(cfg.ConfigError, match=valid):
        cfg.load(sets=["run.preset=avx2"])


def test_the_first_line_names_the_variant_and_a_resume_keeps_it(machine, monkeypatch, tmp_path):
    table = {"ppo": {"update_epochs": 1, "num_minibatches": 2}}
    monkeypatch.setitem(presets.VARIANT_DEFAULTS["fp32"], "cartpole", table)
    out = tmp_path / "run"
    small = ["--game", "cartpole", "--num-envs", "8", "--set", "ppo.num_steps=16"]
    machine("avx2")
    first = cli_in_process("run", *small, "--steps", "256", "--out", out, "--device", "cpu")
    assert first.returncode == 0, first.stderr
    line = header(first.stdout)
    assert "| fp32 preset (CPU class avx2, no native bf16) |" in line
    assert "ppo.update_epochs=1 (cartpole fp32 preset)" in line
    saved = (out / "config.toml").read_text()
    assert 'preset = "fp32"' in saved
    # the same run continued on a machine whose class would choose the base preset
    machine("amx")
    later = cli_in_process("run", "--resume", out, "--steps", "512", "--device", "cpu")
    assert later.returncode == 0, later.stderr
    resumed = cfg.load(out / "config.toml")
    assert resumed.run.preset == "fp32"
    assert (resumed.learner.update_epochs, resumed.learner.num_minibatches) == (1, 2)
    assert "fp32 preset" in header(later.stdout)
    # a run on that machine from the start gets the base preset, and the line says nothing of it
    fresh = cli_in_process(
        "run", *small, "--steps", "128", "--out", tmp_path / "amx", "--device", "cpu"
    )
    assert fresh.returncode == 0, fresh.stderr
    assert "fp32 preset" not in header(fresh.stdout)
    assert cfg.load(tmp_path / "amx" / "config.toml").learner.update_epochs != 1

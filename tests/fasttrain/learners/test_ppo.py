"""PPO and `fasttrain run`: run directory, resume bit for bit, errors, Ctrl-C, play."""

import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.learners.ppo import Trainer
from fasttrain.run import checkpoint
from fasttrain.run.runner import run
from tests.cli import cli_in_process, header

TINY = {
    "game": {
        "snake": {
            "height": 6,
            "width": 6,
            "ppo": {
                "num_envs": 16,
                "num_steps": 8,
                "num_minibatches": 2,
                "update_epochs": 2,
                "anneal_lr": False,
            },
        }
    },
    "model": {"hidden": 32},
    "log": {"progress": False, "interval_s": 0.01},
}
TINY_SETS = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.ppo.num_envs=16",
    "game.snake.ppo.num_steps=8",
    "game.snake.ppo.num_minibatches=2",
    "model.hidden=32",
    "log.progress=false",
    "run.compile=off",  # not the runs of 10**8 steps that stand for "until stopped"
]

# the columns of a PPO run's metrics.csv (CleanRL's names)
PPO_COLUMNS = (
    "global_step",
    "time_s",
    "sps",
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/score",
    "charts/learning_rate",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/skipped_updates",
    "time/env",
    "time/forward",
    "time/learn",
    "time/other",
)


def tiny(steps, **extra):
    data = cfg.merge(TINY, {"game": {"snake": {"ppo": {"total_timesteps": steps}}}})
    return cfg.from_dict(cfg.merge(data, extra))


def cli(*args):
    """``fasttrain ARGS`` in this process: these tests read what the command prints and
    writes, not the process it runs in."""
    return cli_in_process(*args)


def test_resume_equals_straight_run_bit_for_bit(tmp_path):
    quiet = dict(echo=lambda *_: None)
    run(tiny(1024), out=tmp_path / "straight", **quiet)
    run(tiny(512), out=tmp_path / "halves", **quiet)
    run(tiny(1024), resume=tmp_path / "halves", **quiet)
    a = checkpoint.load(tmp_path / "straight")
    b = checkpoint.load(tmp_path / "halves")
    assert a["global_step"] == b["global_step"] == 1024
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["env"]:
        assert np.array_equal(a["env"][key], b["env"][key]), key
    assert torch.equal(a["next_obs"], b["next_obs"])
    # the resumed run appended to metrics.csv and moved on from the first half
    rows = list(csv.DictReader(open(tmp_path / "halves" / "metrics.csv")))
    assert [int(r["global_step"]) for r in rows][-1] == 1024 and len(rows) >= 2


def test_training_changes_the_policy_and_logs_finite_losses(tmp_path):
    config = tiny(2048)
    trainer = Trainer(config, warn=lambda *_: None)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    (losses,) = trainer.iterate()  # a solo trainer's one member
    assert all(np.isfinite(v) for v in losses.values())
    assert any(
        not torch.equal(p, q) for p, q in zip(before, trainer.policy.parameters(), strict=True)
    )
    # the env wrote the rollout straight into storage: every slot holds a snake board
    assert (trainer.storage.obs[:, :, 1].sum(dim=(2, 3)) == 1).all()  # exactly one head per board


def test_anneal_ent_decays_the_entropy_bonus_with_the_iterations():
    def trainer(anneal):
        ppo = {"ent_coef": 0.05, "anneal_ent": anneal}
        return Trainer(tiny(16 * 8 * 4, game={"snake": {"ppo": ppo}}), warn=lambda *_: None)

    annealed, fixed = trainer(True), trainer(False)
    assert annealed.num_iterations == 4
    seen, kept = [], []
    for _ in range(4):
        annealed.iterate()
        fixed.iterate()
        seen.append(float(annealed.ent_coef))
        kept.append(float(fixed.ent_coef))
    # the coefficient each update used: 0.05 at the first, falling by a quarter per iteration
    np.testing.assert_allclose(seen, [0.05, 0.0375, 0.025, 0.0125], rtol=1e-6)
    np.testing.assert_allclose(kept, [0.05] * 4, rtol=1e-6)
    # and the loss carries it: the loss moves by -(change) * entropy
    mb = torch.arange(annealed.minibatch_size)
    annealed.ent_coef.fill_(0.0)
    base, stats = annealed.loss(mb)
    annealed.ent_coef.fill_(0.5)
    other, _ = annealed.loss(mb)
    assert stats[2] > 0.1  # a policy with entropy left to reward
    torch.testing.assert_close(other - base, -0.5 * stats[2])


def test_truncated_steps_bootstrap_from_final_obs_value():
    config = tiny(512, game={"snake": {"max_steps_without_food": 3}})
    trainer = Trainer(config, warn=lambda *_: None)
    trainer.rollout()
    trainer.compute_advantages()
    rows = trainer.storage.truncated.nonzero(as_tuple=True)
    assert rows[0].numel() > 0
    with torch.inference_mode():
        want = trainer.policy.value(trainer.storage.final_obs[rows])
    assert torch.allclose(trainer.storage.final_values[rows], want)
    # the final observation is the board before the reset, not the new episode's first board
    assert not torch.equal(trainer.storage.final_obs[rows], trainer.storage.obs[1:][rows])


def test_cli_run_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    result = cli(
        "run",
        "--game",
        "snake",
        "--steps",
        "512",
        "--out",
        str(out),
        "--seed",
        "3",
        *sum((["--set", s] for s in TINY_SETS), []),
    )
    assert result.returncode == 0, result.stderr
    assert "done:" in result.stdout and "SPS" in result.stdout
    resolved = cfg.tomllib.loads((out / "config.toml").read_text())
    assert resolved["run"]["seed"] == 3 and resolved["game"]["snake"]["height"] == 6
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert rows and set(PPO_COLUMNS) <= set(rows[0])
    assert int(rows[-1]["global_step"]) == 512
    summary = json.loads((out / "summary.json").read_text())
    assert summary["global_step"] == 512 and not summary["interrupted"]
    assert checkpoint.load(out)["global_step"] == 512
    assert (out / "curves.png").read_bytes().startswith(b"\x89PNG")  # log.curves: on by default

    # an existing run is never overwritten
    before = (out / "checkpoint.pt").read_bytes()
    again = cli(
        "run", "--steps", "512", "--out", str(out), *sum((["--set", s] for s in TINY_SETS), [])
    )
    assert again.returncode != 0 and "--resume" in again.stderr
    assert (out / "checkpoint.pt").read_bytes() == before

    # a trained agent plays
    played = cli("play", "--game", "snake", "--checkpoint", str(out), "--steps", "5")
    assert played.returncode == 0, played.stderr
    assert played.stdout.count("@") >= 6


@pytest.mark.parametrize(
    "args, words",
    [
        (["--set", "ppo.learnin_rate=1"], ["unknown key 'learnin_rate'", "learning_rate"]),
        (["--game", "tetris"], ["unknown game 'tetris'", "snake"]),
        (
            ["--set", "game.snake.ppo.num_envs=11", "--set", "game.snake.ppo.num_steps=3"],
            ["does not split"],
        ),
        (["--device", "cuda"], ["cuda", "fasttrain[cuda]"]),
    ],
)
def test_cli_bad_input_fails_before_writing(tmp_path, args, words):
    out = tmp_path / "never"
    result = cli("run", "--steps", "64", "--out", str(out), *args)
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr
    assert not out.exists()


def test_missing_and_corrupt_checkpoints(tmp_path):
    result = cli("run", "--resume", str(tmp_path), "--steps", "64")
    assert result.returncode != 0 and "no checkpoint" in result.stderr
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    result = cli("play", "--checkpoint", str(tmp_path))
    assert result.returncode != 0 and "corrupt" in result.stderr


def test_checkpoint_from_another_device_or_env_is_refused_before_any_change(tmp_path):
    run(tiny(256), out=tmp_path / "a", echo=lambda *_: None)
    state = checkpoint.load(tmp_path / "a")
    assert state["device"] == "cpu"
    trainer = Trainer(tiny(256), warn=lambda *_: None)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    with pytest.raises(cfg.ConfigError, match="written on device 'cuda'.*run.device = 'cuda'"):
        trainer.load_state_dict({**state, "device": "cuda"})
    bad_env = {**state["env"], "obs": state["env"]["obs"][:, :1]}
    with pytest.raises(cfg.ConfigError, match="does not fit this run.*'obs'"):
        trainer.load_state_dict({**state, "env": bad_env})
    assert trainer.global_step == 0
    for key, value in trainer.policy.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.posix
def test_ctrl_c_saves_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fasttrain.cli",
            "run",
            "--steps",
            "100000000",
            "--out",
            str(out),
            *sum((["--set", s] for s in TINY_SETS), []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "metrics.csv").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stdout
    state = checkpoint.load(out)
    assert state["global_step"] > 0
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True


def test_amp_bf16_and_compile_fallback(monkeypatch):
    trainer = Trainer(tiny(256, run={"amp": "bf16"}), warn=lambda *_: None)
    assert all(np.isfinite(v) for v in trainer.iterate()[0].values())

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch, "compile", broken)
    warnings = []
    trainer = Trainer(tiny(256, run={"compile": "default"}), warn=warnings.append)
    assert len(warnings) == 1 and "running eagerly" in warnings[0]
    assert all(np.isfinite(v) for v in trainer.iterate()[0].values())
    with pytest.raises(cfg.ConfigError, match="bf16"):
        Trainer(tiny(256, run={"amp": "fp16"}))


@pytest.mark.slow
def test_ppo_learns_snake_8x8(tmp_path):
    """PPO on Snake 8x8 reaches a mean score of 5 within 2M steps (~2-3 minutes here)."""
    config = cfg.from_dict(
        {
            "game": {"snake": {"height": 8, "width": 8, "ppo": {"total_timesteps": 2_000_000}}},
            "log": {"progress": False},
        }
    )
    summary = run(config, out=tmp_path / "learn", echo=lambda *_: None)
    assert summary["score"] >= 5.0, summary


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    """PPO with the [game.cartpole.ppo] defaults reaches mean return 475 (500k steps, ~15 s)."""
    config = cfg.from_dict({"game": {"name": "cartpole"}, "log": {"progress": False}})
    summary = run(config, out=tmp_path / "cartpole", echo=lambda *_: None)
    assert summary["episodic_return"] >= 475.0, summary


def test_cli_set_ppo_section_beats_the_snake_presets(tmp_path):
    out = tmp_path / "run"
    sets = [
        "ppo.num_envs=8",
        "ppo.total_timesteps=512",
        "ppo.num_steps=8",
        "ppo.num_minibatches=2",
        "game.snake.height=6",
        "game.snake.width=6",
        "model.hidden=32",
        "log.progress=false",
    ]
    result = cli(
        "run", "--game", "snake", "--out", str(out), *sum((["--set", s] for s in sets), [])
    )
    assert result.returncode == 0, result.stderr
    first = header(result.stdout)
    assert "8 envs x 8 steps" in first and "ppo.num_envs=8 (--set)" in first, first
    state = checkpoint.load(out)
    assert state["env"]["obs"].shape[0] == 8  # 8 environments, not snake's tuned 1024
    assert state["global_step"] == 512


@pytest.mark.slow
def test_ppo_learns_minatar_breakout(tmp_path):
    """PPO with the minatar-breakout presets (pgx's minimal action set, sticky actions, 512
    units) reaches a mean return of 10 within 2M steps (seed 0 in fp32: 1.4M steps, ~140 s, on
    a 2-core Intel Xeon; 1.04M, 77 s, on a 2-core AMD EPYC; random play: 0.4). The run stops
    at the first metrics row (one iteration's episodes) at 10 or more. It runs in fp32 on every
    CPU, where amp=auto would pick bf16 on some (AVX512-BF16, AMX) and not on others: in bf16 on
    the EPYC, seeds 1-4 reached 10 after 0.45-0.64M steps while seed 0 stayed near 6.7. The
    run keeps the preset's steps (16M), so its learning rate decays as in a real run, and stops
    at the floor or at 2M steps."""
    config = cfg.from_dict(
        {
            "game": {"name": "minatar-breakout"},
            "run": {"amp": "off"},
            "log": {"progress": False, "curves": False},
        }
    )

    def reached(row) -> bool:
        return float(row["charts/episodic_return"]) >= 10.0 or int(row["global_step"]) >= 2e6

    summary = run(config, out=tmp_path / "breakout", echo=lambda *_: None, on_row=reached)
    assert summary["stopped_early"] and summary["episodic_return"] >= 10.0, summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "floor"), [("minatar-freeway", 10.0), ("minatar-space_invaders", 20.0)]
)
def test_ppo_learns_freeway_and_space_invaders(tmp_path, game, floor):
    """The other two MinAtar games that train with PPO by default clear a low floor with their
    preset (and whatever run.amp=auto picks) within 1.5M steps. In `fasttrain bench --learning`
    (10M steps, bf16, 2-core AMD EPYC, 2026-11-26) Freeway's first episodes, which all end at
    step 2,500 of each game, returned 15.6, 19.0 and 17.4 (seeds 0-2; on the full action set
    13.8, 0.3 and 12.1, and 23-25 at 0.66M steps; random play: 0); Space Invaders passed 20
    after ~0.4M steps (random play: ~2). The run keeps the preset's schedules (10M steps) and
    stops at the first metrics row at the floor or more, or at 1.5M steps."""
    config = cfg.from_dict(
        {"game": {"name": game}, "log": {"progress": False, "curves": False}},
    )
    assert config.run.algo == "ppo"

    def reached(row) -> bool:
        return float(row["charts/episodic_return"]) >= floor or int(row["global_step"]) >= 1.5e6

    summary = run(config, out=tmp_path / "run", echo=lambda *_: None, on_row=reached)
    assert summary["stopped_early"] and summary["episodic_return"] >= floor, summary


# ------------------------------------------------------------------ gradient accumulation
# ppo.max_minibatch_size: chunks of a minibatch accumulate gradients before one optimizer step,
# with the result of the whole minibatch (feed-forward and recurrent policies).


def snake(**ppo):
    return cfg.from_dict(
        {
            "run": {"amp": "off"},
            "game": {
                "snake": {
                    "height": 6,
                    "width": 6,
                    "ppo": {
                        "num_envs": 16,
                        "num_steps": 8,
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "total_timesteps": 512,
                        **ppo,
                    },
                }
            },
            "model": {"hidden": 32},
        }
    )


def recurrent(**ppo):
    return cfg.from_dict(
        {
            "run": {"amp": "off"},
            "game": {
                "name": "cartpole",
                "cartpole": {
                    "ppo": {
                        "num_envs": 8,
                        "num_steps": 16,
                        "bptt_horizon": 4,
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "total_timesteps": 256,
                        **ppo,
                    }
                },
            },
            "model": {"hidden": 16, "core": "gru", "core_size": 8},
        }
    )


def trained(config):
    trainer = Trainer(config, warn=lambda *_: None)
    losses = [trainer.iterate()[0] for _ in range(2)]  # a solo trainer's one member
    return trainer, losses


@pytest.mark.parametrize("make,chunk", [(snake, 16), (snake, 32), (recurrent, 8), (recurrent, 16)])
def test_chunks_equal_one_large_minibatch(make, chunk):
    whole, whole_losses = trained(make())
    split, split_losses = trained(make(max_minibatch_size=chunk))
    assert split.chunk is not None and whole.chunk is None
    assert whole.global_step == split.global_step
    for name, a in whole.policy.state_dict().items():
        b = split.policy.state_dict()[name]
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
    initial = Trainer(make(), warn=print).policy.state_dict()  # same seed: same start
    moved = sum(float((initial[k] - v).abs().sum()) for k, v in whole.policy.state_dict().items())
    assert moved > 0  # the updates did change the weights
    for a, b in zip(whole_losses, split_losses, strict=True):
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-6), key


def test_a_chunk_as_large_as_the_minibatch_changes_nothing():
    trainer = Trainer(snake(max_minibatch_size=64), warn=lambda *_: None)
    assert trainer.chunk is None  # minibatch = 16 * 8 / 2 = 64 samples


@pytest.mark.parametrize(
    "make,value,words",
    [
        (snake, 24, "do not split into chunks"),
        (snake, -1, "must be >= 0"),
        (recurrent, 6, "do not split into chunks"),
        (recurrent, 2, "whole number"),
    ],
)
def test_bad_sizes_are_refused_in_one_line(make, value, words):
    with pytest.raises(ConfigError, match=words):
        cfg.validate(make(max_minibatch_size=value))

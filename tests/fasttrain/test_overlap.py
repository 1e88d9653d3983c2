"""PPO with ``ppo.overlap``: the rollout of iteration k + 1 is collected with the weights from
before update k while update k runs, and nothing depends on timing."""

from __future__ import annotations

import copy
import time

import pytest
import torch
import torch.nn.functional as F

from fasttrain import checkpoint
from fasttrain import config as cfg
from fasttrain.learners.ppo import Trainer
from fasttrain.runner import run

QUIET = dict(echo=lambda *_: None)


def overlapped(steps: int = 1024, core: str = "none", **ppo) -> cfg.Config:
    settings = {
        "num_envs": 16,
        "num_steps": 8,
        "num_minibatches": 2,
        "update_epochs": 2,
        "anneal_lr": False,
        "overlap": True,
        "total_timesteps": steps,
        **ppo,
    }
    model = {"hidden": 32, "core": core, "core_size": 16}
    if core != "none":
        settings["bptt_horizon"] = 4
    return cfg.from_dict(
        {
            "game": {"snake": {"height": 6, "width": 6, "ppo": settings}},
            "model": model,
            "run": {"torch_threads": 1, "numba_threads": 1},
            "log": {"progress": False, "curves": False},
        }
    )


def logprobs_under(policy, storage) -> torch.Tensor:
    """The log-probabilities of the stored actions under ``policy`` (replaying a recurrent
    policy's stored states)."""
    T = storage.actions.shape[0]
    with torch.inference_mode():
        if not policy.is_recurrent:
            logits, _, _ = policy(storage.obs[:T].reshape(-1, *storage.obs.shape[2:]))
        else:
            logits, _ = policy.unroll(
                storage.obs[:T], storage.states[0], storage.episode_starts[:T]
            )
            logits = logits.reshape(-1, logits.shape[-1])
        logp = F.log_softmax(logits.float(), dim=1)
        return logp.gather(1, storage.actions.reshape(-1, 1))[:, 0].reshape(T, -1)


@pytest.mark.parametrize("core", ["none", "gru"])
def test_rollout_k_plus_1_acts_with_the_weights_from_before_update_k(core):
    trainer = Trainer(overlapped(core=core), warn=lambda *_: None)
    for k in range(3):
        before = copy.deepcopy(trainer.policy)  # the weights before update k
        trainer.iterate()  # update k, and rollout k + 1 collected meanwhile
        after = trainer.policy
        pairs = zip(before.parameters(), after.parameters(), strict=True)
        assert any(not torch.equal(a, b) for a, b in pairs)  # update k moved the weights
        stored = trainer.storage.logprobs  # rollout k + 1's, as the acting policy gave them
        assert torch.allclose(logprobs_under(before, trainer.storage), stored, atol=1e-5), k
        assert not torch.allclose(logprobs_under(after, trainer.storage), stored, atol=1e-5), k
        if core != "none":  # the stored states are those the behaviour policy reached
            with torch.inference_mode():
                _, _, state = before(
                    trainer.storage.obs[0],
                    trainer.storage.states[0],
                    trainer.storage.episode_starts[0],
                )
            assert torch.allclose(trainer.storage.states[1], state, atol=1e-6)
        assert trainer.global_step == (k + 1) * trainer.steps_per_iteration


def test_two_overlapped_runs_with_one_seed_give_the_same_weights_whatever_the_timing(
    tmp_path, monkeypatch
):
    run(overlapped(), out=tmp_path / "a", **QUIET)
    # the second run's rollout thread is made slow on purpose: the update finishes long first
    collect = Trainer.collect

    def slow_collect(self, storage):
        time.sleep(0.02)
        collect(self, storage)

    monkeypatch.setattr(Trainer, "collect", slow_collect)
    run(overlapped(), out=tmp_path / "b", **QUIET)
    a, b = checkpoint.load(tmp_path / "a"), checkpoint.load(tmp_path / "b")
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


@pytest.mark.parametrize("core", ["none", "gru"])
def test_a_resumed_overlapped_run_continues_bit_for_bit(tmp_path, core):
    run(overlapped(1024, core), out=tmp_path / "straight", **QUIET)
    run(overlapped(512, core), out=tmp_path / "halves", **QUIET)
    half = checkpoint.load(tmp_path / "halves")
    assert "collected" in half  # the rollout collected for the next update is kept
    run(overlapped(1024, core), resume=tmp_path / "halves", **QUIET)
    a, b = checkpoint.load(tmp_path / "straight"), checkpoint.load(tmp_path / "halves")
    assert a["global_step"] == b["global_step"] == 1024
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for key in ("collected", "env"):
        for name in a[key]:
            assert (a[key][name] == b[key][name]).all(), (key, name)


def test_resuming_with_another_overlap_setting_is_refused(tmp_path):
    run(overlapped(256), out=tmp_path / "run", **QUIET)
    with pytest.raises(cfg.ConfigError, match="ppo.overlap = True; resume it with the same"):
        run(overlapped(512, overlap=False), resume=tmp_path / "run", **QUIET)

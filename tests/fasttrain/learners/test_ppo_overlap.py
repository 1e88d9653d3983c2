"""PPO with ``ppo.overlap``: the rollout of iteration k + 1 is collected with the weights from
before update k while update k runs, and nothing depends on timing."""

from __future__ import annotations

import copy
import time

import pytest
import torch
import torch.nn.functional as F

from fasttrain.config import resolve as cfg
from fasttrain.errors import RunError
from fasttrain.learners import LEARNERS, make_trainer
from fasttrain.learners.ppo import Trainer
from fasttrain.learners.ppo_overlap import OverlapTrainer
from fasttrain.run import checkpoint
from fasttrain.run.runner import run

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


def test_ppo_overlap_builds_the_overlapped_trainer_and_plain_ppo_its_base():
    assert LEARNERS["ppo"].choose(overlapped()) is OverlapTrainer
    assert LEARNERS["ppo"].choose(overlapped(overlap=False)) is None
    trainer = make_trainer(overlapped(), warn=lambda *_: None)
    assert type(trainer) is OverlapTrainer and trainer.behaviour is not trainer.policy
    plain = make_trainer(overlapped(overlap=False), warn=lambda *_: None)
    assert type(plain) is Trainer and plain.behaviour is plain.policy


def logprobs_under(policy, storage, horizon: int | None = None) -> torch.Tensor:
    """The log-probabilities of the stored actions under ``policy``; a recurrent policy unrolls
    from the first stored state, or with ``horizon`` from the stored state at the start of each
    ``horizon`` steps (as the update replays its sequences)."""
    T = storage.actions.shape[0]
    with torch.inference_mode():
        if not policy.is_recurrent:
            logits, _, _ = policy(storage.obs[:T].reshape(-1, *storage.obs.shape[2:]))
        else:
            h = horizon or T
            pieces = [
                policy.unroll(
                    storage.obs[t : t + h], storage.states[t], storage.episode_starts[t : t + h]
                )[0]
                for t in range(0, T, h)
            ]
            logits = torch.cat(pieces).reshape(-1, pieces[0].shape[-1])
        logp = F.log_softmax(logits.float(), dim=1)
        return logp.gather(1, storage.actions.reshape(-1, 1))[:, 0].reshape(T, -1)


@pytest.mark.parametrize("core", ["none", "gru"])
def test_rollout_k_plus_1_acts_with_the_weights_from_before_update_k(core):
    trainer = OverlapTrainer(overlapped(core=core), warn=lambda *_: None)
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


OVERLAP_REFUSALS = {
    "rollout stream cut short": (
        ("rollout_generator",),
        lambda t: t[:8],
        "rollout_generator = a uint8 tensor of shape (8,); expected a uint8 tensor of shape "
        "(5056,)",
    ),
    "collected actions out of range": (
        ("collected", "actions"),
        lambda t: t + 7,
        "collected.actions = a int64 tensor of shape (8, 16); expected values in [0, 4)",
    ),
    "collected buffer the rollout lacks": (
        ("collected", "pickles"),
        torch.zeros(1),
        "collected.pickles = a float32 tensor of shape (1,); expected one of obs, ",
    ),
}


def test_a_bad_collected_rollout_is_refused_on_resume_in_one_line(tmp_path):
    from tests.checkpoints import write_mutated

    run(overlapped(256), out=tmp_path / "run", **QUIET)
    for case, (path, value, message) in OVERLAP_REFUSALS.items():
        run_dir = write_mutated(tmp_path / "run", tmp_path / case, path, value)
        with pytest.raises(RunError) as refusal:
            run(overlapped(512), resume=run_dir, **QUIET)
        assert str(refusal.value).startswith(f"checkpoint {message}"), case
        assert "\n" not in str(refusal.value)


def test_resuming_with_another_overlap_setting_is_refused(tmp_path):
    run(overlapped(256), out=tmp_path / "run", **QUIET)
    with pytest.raises(cfg.ConfigError, match="ppo.overlap = True; resume it with the same"):
        run(overlapped(512, overlap=False), resume=tmp_path / "run", **QUIET)


@pytest.mark.parametrize("core", ["none", "gru"])
def test_the_decoupled_ratio_is_taken_against_the_weights_the_update_starts_from(core):
    trainer = OverlapTrainer(overlapped(core=core), warn=lambda *_: None)
    trainer.iterate()  # rollout 0 alone, update 0 while rollout 1 is collected
    start = copy.deepcopy(trainer.policy)  # the weights update 1 starts from
    learned = trainer.storage  # rollout 1, collected with the weights from before update 0
    trainer.iterate()
    # a recurrent policy replays each sequence from the state the behaviour policy stored
    proximal = logprobs_under(start, learned, horizon=4).reshape(-1)
    assert torch.allclose(trainer.b_prox_logprobs, proximal, atol=1e-5)
    behaviour = learned.logprobs.reshape(-1)
    assert not torch.allclose(proximal, behaviour, atol=1e-5)  # one update of lag between them

    # the loss of the paper (Hilton et al. 2021, eq. 3), from the proximal policy's weights
    trainer.policy.load_state_dict(start.state_dict())
    trainer.storage = learned  # the views of the batch update 1 learned from
    trainer.prepare_batch()
    if core == "none":
        mb = torch.arange(trainer.batch_size)
    else:
        steps = torch.arange(trainer.horizon)[:, None] * trainer.rows
        mb = steps + trainer.minibatch_firsts()[None]
    _, stats = trainer.loss(mb)
    flat = mb.reshape(-1)
    adv = trainer.b_advantages[flat]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    weight = torch.minimum((proximal[flat] - behaviour[flat]).exp(), torch.tensor(2.0))
    # the current policy is the proximal one, so its ratio is 1 and nothing is clipped
    assert torch.allclose(stats[0], (-weight * adv).mean(), atol=1e-5)
    assert abs(float(stats[3])) < 1e-5 and float(stats[4]) == 0.0


def test_without_decoupling_the_ratio_is_taken_against_the_behaviour_policy():
    trainer = OverlapTrainer(overlapped(decoupled=False), warn=lambda *_: None)
    trainer.iterate()
    start = copy.deepcopy(trainer.policy)
    learned = trainer.storage
    trainer.iterate()
    assert trainer.b_prox_logprobs is None
    trainer.policy.load_state_dict(start.state_dict())
    trainer.storage = learned
    trainer.prepare_batch()
    _, stats = trainer.loss(torch.arange(trainer.batch_size))
    log_ratio = logprobs_under(start, learned).reshape(-1) - learned.logprobs.reshape(-1)
    assert torch.allclose(stats[3], ((log_ratio.exp() - 1) - log_ratio).mean(), atol=1e-5)
    assert float(stats[3]) > 1e-6  # one update of lag: the ratio starts away from 1

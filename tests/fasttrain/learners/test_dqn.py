"""DQN: replay ring, n-step returns, target masking, prioritized sampling, resume, CLI, errors."""

import csv

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain.config import resolve as cfg
from fasttrain.errors import RunError
from fasttrain.learners.dqn import ReplayBuffer, Trainer, nstep_returns
from fasttrain.run import checkpoint
from fasttrain.run.runner import run
from tests.checkpoints import DELETE, write_mutated
from tests.cli import cli_in_process

TINY = {
    "run": {"algo": "dqn"},
    "game": {
        "snake": {
            "height": 6,
            "width": 6,
            "dqn": {
                "num_envs": 8,
                "num_steps": 8,
                "train_frequency": 2,
                "buffer_size": 96,
                "learning_starts": 64,
                "batch_size": 16,
                "target_network_frequency": 64,
            },
        }
    },
    "model": {"hidden": 32},
    "log": {"progress": False, "interval_s": 0.01},
}
TINY_SETS = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.dqn.num_envs=8",
    "game.snake.dqn.num_steps=8",
    "game.snake.dqn.buffer_size=96",
    "game.snake.dqn.learning_starts=64",
    "game.snake.dqn.batch_size=16",
    "model.hidden=32",
    "log.progress=false",
]


def tiny(steps, **dqn):
    data = cfg.merge(TINY, {"game": {"snake": {"dqn": {"total_timesteps": steps, **dqn}}}})
    return cfg.from_dict(data)


def cartpole_trainer(num_envs=4, max_episode_steps=20, **dqn):
    dqn = {
        "num_envs": num_envs,
        "num_steps": 8,
        "train_frequency": 8,
        "buffer_size": 64,
        "learning_starts": 1000,
        "batch_size": 8,
        "total_timesteps": 4096,
        "n_step": 1,
        **dqn,
    }
    config = cfg.from_dict(
        {
            "run": {"algo": "dqn", "device": "cpu"},
            "model": {"hidden": 16},
            "game": {
                "name": "cartpole",
                "cartpole": {"max_episode_steps": max_episode_steps, "dqn": dqn},
            },
        }
    )
    return Trainer(config, warn=lambda *_: None)


# ------------------------------------------------------------------------------- replay ring


def test_ring_stores_true_next_obs_and_newest_overwrites_oldest():
    """Every stored transition matches a reference env stepped with the same actions."""
    trainer = cartpole_trainer()
    buffer = trainer.buffer
    reference = fasttrain.make("cartpole", num_envs=4, backend="cpu", seed=0, max_episode_steps=20)
    records = []
    for _ in range(3 * buffer.num_slots):  # wraps around the ring more than twice
        obs = reference.obs.clone()
        trainer.env_step()
        slot = (buffer.pos - 1) % buffer.num_slots
        reference.step(buffer.actions[slot])
        ended = (reference.terminated | reference.truncated)[:, None]
        true_next = torch.where(ended, reference.final_obs, reference.obs)
        records.append(
            (slot, obs, reference.rewards.clone(), reference.terminated.clone(), true_next.clone())
        )
    assert sum(int(r[3].sum()) for r in records) > 0  # terminations happened
    assert buffer.count == buffer.num_slots - 1
    envs = torch.arange(4)
    for slot, obs, reward, terminated, true_next in records[-buffer.count :]:
        got_obs, _, returns, discount, next_obs = buffer.gather(torch.full((4,), slot), envs, 0.9)
        assert torch.equal(got_obs, obs) and torch.equal(returns, reward)
        assert torch.equal(next_obs, true_next)
        assert torch.equal(discount, torch.where(terminated, 0.0, 0.9))
    # the oldest records were overwritten: their slots now hold newer observations
    old_slot, old_obs = records[0][0], records[0][1]
    assert not torch.equal(buffer.obs[old_slot], old_obs)


def test_uniform_sampling_draws_only_complete_windows():
    buffer = ReplayBuffer(
        num_slots=6, num_envs=3, obs_shape=(1,), obs_dtype=torch.float32, device="cpu", n_step=2
    )
    generator = torch.Generator().manual_seed(0)
    for step in range(8):  # the ring of 6 slots wraps; pos ends at 8 % 6 = 2
        buffer.obs[buffer.next_slot] = step + 1
        buffer.advance()
    assert (buffer.pos, buffer.count, buffer.num_valid) == (2, 5, 4)
    slots, envs, weights = buffer.sample(4000, generator)
    assert weights is None and envs.min() == 0 and envs.max() == 2
    # valid start slots: the 5 stored ones (3, 4, 5, 0, 1) minus the newest (1): its window
    # would reach the current, unfinished slot 2
    assert set(slots.tolist()) == {3, 4, 5, 0}


# ------------------------------------------------------------------------------- targets


def test_nstep_returns_stop_at_termination_and_truncation():
    g = 0.5
    rewards = torch.tensor(
        [
            [1.0, 2.0, 4.0, 8.0],  # no episode end: bootstrap after 4 steps
            [1.0, 2.0, 4.0, 8.0],  # terminated at step 1
            [1.0, 2.0, 4.0, 8.0],  # truncated at step 2, terminated at 3
            [1.0, 2.0, 4.0, 8.0],
        ]
    )  # terminated at step 0
    terminated = torch.tensor([[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [1, 0, 1, 0]]).bool()
    truncated = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]).bool()
    returns, discount, last, ended = nstep_returns(rewards, terminated, truncated, g)
    assert returns.tolist() == [1 + 1 + 1 + 1, 1 + 1, 1 + 1 + 1, 1]
    assert discount.tolist() == [g**4, 0.0, g**3, 0.0]  # truncation bootstraps, termination not
    assert last.tolist() == [3, 1, 2, 0]
    assert ended.tolist() == [False, True, True, True]


def test_targets_mask_termination_and_bootstrap_truncation_from_final_obs():
    trainer = cartpole_trainer(num_envs=32, max_episode_steps=12, buffer_size=32 * 16, n_step=1)
    buffer = trainer.buffer
    for _ in range(20):  # the ring of 17 slots wraps
        trainer.env_step()
    stored = (buffer.pos - buffer.count + torch.arange(buffer.count)) % buffer.num_slots
    slots = stored.repeat_interleave(32)
    envs = torch.arange(32).repeat(buffer.count)
    obs, actions, returns, discount, next_obs = buffer.gather(slots, envs, 0.99)
    terminated = buffer.terminated[slots, envs]
    truncated = buffer.truncated[slots, envs]
    assert terminated.any() and truncated.any()
    # truncated rows bootstrap from the final observation, not the next episode's first one
    assert torch.equal(next_obs[truncated], buffer.final_obs[slots, envs][truncated])
    assert not torch.equal(
        next_obs[truncated], buffer.obs[(slots + 1) % buffer.num_slots, envs][truncated]
    )
    target = trainer.td_target(returns, discount, next_obs)
    with torch.no_grad():
        next_value = trainer.target_network(next_obs).max(dim=1).values
    assert torch.equal(target[terminated], returns[terminated])  # no bootstrap
    assert torch.allclose(
        target[~terminated], returns[~terminated] + 0.99 * next_value[~terminated]
    )


# ------------------------------------------------------------------------------- prioritized


def test_prioritized_sampling_proportions_and_importance_weights():
    alpha, beta = 0.6, 0.4
    buffer = ReplayBuffer(
        num_slots=5,
        num_envs=2,
        obs_shape=(1,),
        obs_dtype=torch.float32,
        device="cpu",
        prioritized=True,
        prio_alpha=alpha,
    )
    for _ in range(4):
        buffer.advance()  # 4 stored steps x 2 envs = 8 transitions in slots 0..3
    td = torch.tensor([0.5, 1.0, 2.0, 4.0, 0.1, 3.0, 1.5, 0.25])
    slots, envs = torch.arange(4).repeat_interleave(2), torch.arange(2).repeat(4)
    buffer.update_priorities(slots, envs, td)
    p = (td.abs() + 1e-6) ** alpha
    want = (p / p.sum()).double()
    s, e, weights = buffer.sample(200_000, torch.Generator().manual_seed(0), beta)
    counts = torch.bincount(s * 2 + e, minlength=10).double()
    assert counts[8:].sum() == 0  # slot 4 (the current, unfinished one) is never drawn
    assert torch.allclose(counts[:8] / counts.sum(), want, atol=0.01)
    expected = (8 * want) ** -beta / (8 * want.min()) ** -beta
    assert torch.allclose(weights.double(), expected[s * 2 + e], rtol=1e-5)
    assert weights.max() <= 1.0


def prioritized_history(n_step, steps=40, num_slots=7, num_envs=3):
    """A prioritized buffer after ``steps`` advances (the ring wraps), sampled and updated on the
    way, then advanced twice more without a sample; returns it and the generator."""
    buffer = ReplayBuffer(
        num_slots, num_envs, (1,), torch.float32, "cpu", n_step=n_step, prioritized=True
    )
    generator = torch.Generator().manual_seed(n_step)
    for step in range(steps):
        buffer.advance()
        if buffer.num_valid and step % 3 == 0:
            slots, envs, _ = buffer.sample(8, generator, 0.5)
            td = torch.randn(8, generator=generator) * 10 ** torch.randint(-2, 3, (8,))
            buffer.update_priorities(slots, envs, td)
    buffer.advance()
    buffer.advance()  # the tree catches up with these at the next sample
    return buffer, generator


def brute_force_probabilities(buffer):
    """The O(buffer) rule: stored priorities, 0 for windows that reach the current slot."""
    S = buffer.num_slots
    weights = buffer.priorities.double().clone()
    weights[(buffer.pos - torch.arange(S)) % S < buffer.n_step] = 0.0
    return (weights / weights.sum()).view(-1)


@pytest.mark.parametrize("n_step", [1, 3])
def test_prioritized_sampling_matches_priorities_and_skips_incomplete_windows(n_step):
    buffer, generator = prioritized_history(n_step)
    S, N, beta, draws = buffer.num_slots, buffer.num_envs, 0.4, 200_000
    want = brute_force_probabilities(buffer)
    slots, envs, weights = buffer.sample(draws, generator, beta)
    # only stored transitions whose n-step window is complete: n_step .. count slots back
    offsets = (buffer.pos - slots) % S
    assert offsets.min() == n_step and offsets.max() == buffer.count == S - 1
    counts = torch.bincount(slots * N + envs, minlength=S * N).double()
    sigma = (draws * want * (1 - want)).sqrt()
    assert torch.all((counts - draws * want).abs() <= 5 * sigma), (counts, draws * want)
    assert torch.all(counts[want == 0] == 0) and (want == 0).sum() >= n_step * N
    size = buffer.num_valid * N
    p = want[slots * N + envs]
    expected = (size * p) ** -beta / (size * want[want > 0].min()) ** -beta
    assert torch.allclose(weights.double(), expected, rtol=1e-6, atol=0)


def test_prioritized_tree_rebuilt_on_load_equals_the_running_tree_bit_for_bit():
    buffer, _ = prioritized_history(n_step=3)
    copy = ReplayBuffer(7, 3, (1,), torch.float32, "cpu", n_step=3, prioritized=True)
    copy.load_state_dict(buffer.state_dict())
    a = buffer.sample(64, torch.Generator().manual_seed(5), 0.5)
    b = copy.sample(64, torch.Generator().manual_seed(5), 0.5)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(buffer.tree.sums, copy.tree.sums)
    assert torch.equal(buffer.tree.mins, copy.tree.mins)


def test_prioritized_trainer_updates_priorities_and_learns():
    trainer = Trainer(
        tiny(512, prioritized=True, n_step=3, double_q=True, dueling=True, loss="huber"),
        warn=lambda *_: None,
    )
    before = [p.detach().clone() for p in trainer.q_network.parameters()]
    for _ in range(6):
        (losses,) = trainer.iterate()  # a solo trainer's one member
    assert np.isfinite(losses["losses/td_loss"]) and np.isfinite(losses["losses/q_values"])
    assert any(
        not torch.equal(p, q) for p, q in zip(before, trainer.q_network.parameters(), strict=True)
    )
    stored = trainer.buffer.priorities[trainer.buffer.priorities > 0]
    assert stored.numel() and not torch.all(stored == stored[0])  # updated from TD errors


# ------------------------------------------------------------------------------- runs


def test_resume_equals_straight_run_bit_for_bit(tmp_path):
    quiet = dict(echo=lambda *_: None)
    # the buffer of 96 wraps several times in 1024 steps; epsilon and beta are held constant
    # because their schedules stretch over total_timesteps, which differs between the runs
    extra = dict(n_step=2, prioritized=True, start_e=0.3, end_e=0.3, prio_beta=1.0)
    run(tiny(1024, **extra), out=tmp_path / "straight", **quiet)
    run(tiny(512, **extra), out=tmp_path / "halves", **quiet)
    run(tiny(1024, **extra), resume=tmp_path / "halves", **quiet)
    a = checkpoint.load(tmp_path / "straight")
    b = checkpoint.load(tmp_path / "halves")
    assert a["global_step"] == b["global_step"] == 1024
    for part in ("model", "target_model"):
        for key in a[part]:
            assert torch.equal(a[part][key], b[part][key]), (part, key)
    for key in a["env"]:
        assert np.array_equal(a["env"][key], b["env"][key]), key
    for key, value in a["replay"].items():
        assert (
            torch.equal(value, b["replay"][key])
            if isinstance(value, torch.Tensor)
            else value == b["replay"][key]
        ), key
    rows = list(csv.DictReader(open(tmp_path / "halves" / "metrics.csv")))
    assert int(rows[-1]["global_step"]) == 1024 and "losses/td_loss" in rows[0]


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """A finished 256-step DQN run on Snake 6x6, with a prioritized replay buffer."""
    out = tmp_path_factory.mktemp("dqn") / "run"
    run(tiny(256, prioritized=True), out=out, echo=lambda *_: None)
    return out


REPLAY_REFUSALS = {
    "slot past the ring": (("replay", "pos"), 10**6, r"replay\.pos = 1000000; expected a whole "),
    "count a float": (("replay", "count"), 3.0, r"replay\.count = 3\.0; expected a whole "),
    "action out of range": (
        ("replay", "actions"),
        lambda t: t + 99,
        r"replay\.actions = a int64 tensor of shape \(\d+, 8\); expected values in \[0, 4\)$",
    ),
    "negative priority": (
        ("replay", "priorities"),
        lambda t: t - 1,
        r"replay\.priorities = a float32 tensor .*; expected priorities >= 0$",
    ),
    "frames cut short": (
        ("replay", "frames"),
        lambda t: t[:1],
        r"replay\.frames = a uint8 tensor of shape \(1, .*; expected a uint8 tensor of shape",
    ),
    "no target network": (("target_model",), DELETE, r"has no target_model; expected network "),
}


@pytest.mark.parametrize("case", REPLAY_REFUSALS)
def test_a_bad_replay_buffer_or_target_is_refused_on_resume_in_one_line(dqn_run, tmp_path, case):
    path, value, message = REPLAY_REFUSALS[case]
    run_dir = write_mutated(dqn_run, tmp_path / "run", path, value)
    before = (run_dir / checkpoint.FILENAME).read_bytes()
    with pytest.raises(RunError, match="^checkpoint " + message) as refusal:
        run(tiny(512, prioritized=True), resume=run_dir, echo=lambda *_: None)
    assert "\n" not in str(refusal.value)
    assert (run_dir / checkpoint.FILENAME).read_bytes() == before


def cli(*args):
    """``fasttrain ARGS`` in this process: these tests read what the command prints and
    writes, not the process it runs in."""
    return cli_in_process(*args)


def test_cli_run_dqn_writes_the_run_directory_and_plays(tmp_path):
    out = tmp_path / "run"
    sets = sum((["--set", s] for s in TINY_SETS), [])
    result = cli(
        "run",
        "--game",
        "snake",
        "--algo",
        "dqn",
        "--steps",
        "256",
        "--num-envs",
        "16",
        "--out",
        str(out),
        *sets,
    )
    assert result.returncode == 0, result.stderr
    assert "learner: dqn ([dqn] applies)" in result.stdout and "td " in result.stdout
    resolved = cfg.tomllib.loads((out / "config.toml").read_text())
    assert resolved["run"]["algo"] == "dqn"
    assert resolved["game"]["snake"]["dqn"]["num_envs"] == 16  # --num-envs went to [game.snake.dqn]
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert int(rows[-1]["global_step"]) == 256 and np.isfinite(float(rows[-1]["losses/td_loss"]))
    assert checkpoint.load(out)["global_step"] == 256
    played = cli("play", "--game", "snake", "--checkpoint", str(out), "--steps", "3")
    assert played.returncode == 0, played.stderr


def test_cli_rejects_dqn_budget_below_learning_starts(tmp_path):
    result = cli("run", "--algo", "dqn", "--steps", "100", "--out", str(tmp_path / "never"))
    assert result.returncode != 0 and "learning_starts" in result.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_dqn_learns_cartpole(tmp_path):
    """DQN reaches a mean training return of 475 on CartPole within 400k steps (~1 min here).

    Budget: 400k env steps, 16 envs, the [game.cartpole.dqn] defaults (n_step 3, Double DQN,
    learning_rate 2.5e-4, target update every 500 steps), a 2x128 ReLU MLP.
    """
    config = cfg.from_dict(
        {
            "run": {"algo": "dqn", "device": "cpu"},
            "game": {"name": "cartpole", "cartpole": {"dqn": {"total_timesteps": 400_000}}},
            "model": {"hidden": 128, "activation": "relu"},
        }
    )
    trainer = Trainer(config, warn=lambda *_: None)
    means = []
    while trainer.iteration < trainer.num_iterations:
        trainer.iterate()
        if trainer.iteration % 50 == 0:  # every 25,600 steps
            stats = trainer.env.stats()
            means.append(stats.get("return", 0.0))
            if means[-1] >= 475:  # reached within the budget: the rest would not change that
                break
    assert max(means) >= 475, means

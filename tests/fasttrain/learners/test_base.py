"""The trainer protocol (``learners/base.py``): the first log line's precision, threads sized
by the run's rows and network, and a resumed run's learning-rate schedule."""

import pytest
import torch

from fasttrain import device as devices
from fasttrain.config import resolve as cfg
from fasttrain.learners import LEARNERS, base, context
from fasttrain.learners.ppo import Trainer
from tests.conftest import small_snake as small


def test_first_log_line_names_the_updates_precision(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512_bf16"})
    assert "| bf16 update" in Trainer(small(run={"amp": "bf16"}), warn=print).describe()
    assert "bf16" not in Trainer(small(run={"amp": "off"}), warn=print).describe()
    assert "bf16" not in Trainer(small(run={"amp": "auto"}), warn=print).describe()  # 16 wide


@pytest.mark.parametrize(
    "game, algo, small",
    [("cartpole", "ppo", True), ("cartpole", "dqn", True), ("snake", "ppo", False)],
)
def test_trainers_size_threads_by_rows_times_weights(monkeypatch, four_cores, game, algo, small):
    """CartPole's default networks stepping 64 (PPO) or 16 (DQN) rows are small; Snake's 512
    rows of a 576-input network are not."""
    seen = []
    setup = base.setup_threads  # the name the trainer base sizes its threads with
    monkeypatch.setattr(base, "setup_threads", lambda *a: seen.append(a) or setup(*a))
    # run.compile = off: the sizing comes before the compile, and Snake's default run of 2M+
    # steps would otherwise compile in a background thread the test then waits for
    config = cfg.from_dict({"game": {"name": game}, "run": {"algo": algo, "compile": "off"}})
    trainer = LEARNERS[algo].trainer(config, warn=lambda *_: None)
    network = trainer.policy if algo == "ppo" else trainer.q_network
    weights = sum(p.numel() for p in network.parameters() if p.ndim > 1)
    assert seen[-1][2] == trainer.env.num_rows * weights  # the last call sized them
    assert (seen[-1][2] < context.SMALL_STEP_WORK) is small
    assert torch.get_num_threads() == (1 if small else 4)


def test_a_resumed_trainer_takes_the_learning_rate_schedule_of_its_own_config():
    """The checkpoint's optimizer holds the rate it was written with; a resumed trainer
    sets the one its config gives at the resumed iteration (anneal_lr turned off or on,
    learning_rate changed), and keeps the checkpoint's where they agree."""

    def quiet(*_):
        pass

    def ppo(**section):
        return small(game={"snake": {"ppo": {"total_timesteps": 16 * 8 * 4, **section}}})

    annealed = Trainer(ppo(anneal_lr=True, learning_rate=1e-3), warn=quiet)
    annealed.iterate()
    annealed.iterate()  # the next update's rate is half the full one (2 of 4 iterations left)
    state = annealed.state_dict()
    assert annealed.learning_rate == pytest.approx(0.75e-3)  # the rate the second update used

    constant = Trainer(ppo(anneal_lr=False, learning_rate=1e-3), warn=quiet)
    constant.load_state_dict(state)
    assert constant.learning_rate == 1e-3
    constant.iterate()
    assert constant.learning_rate == 1e-3

    again = Trainer(ppo(anneal_lr=True, learning_rate=4e-3), warn=quiet)
    again.load_state_dict(state)
    assert again.learning_rate == pytest.approx(2e-3)

    same = Trainer(ppo(anneal_lr=False, learning_rate=1e-3), warn=quiet)
    same.load_state_dict(constant.state_dict())
    assert same.learning_rate == 1e-3

"""The run context (``learners/context.py``) and the trainer base (``learners/base.py``): the
autocast run.amp picks, the first log line's precision, and threads sized for the run (one per
core, one for small steps, networks initialised on one thread)."""

import pytest
import torch

from fasttrain import config as cfg
from fasttrain import device as devices
from fasttrain.learners import LEARNERS, base, context
from fasttrain.learners.ppo import Trainer
from tests.conftest import small_snake as small


def test_amp_auto_sets_the_trainers_autocast(monkeypatch):
    cases = (
        ({"avx512_bf16"}, 128, torch.bfloat16),
        ({"avx512_bf16"}, 16, None),
        (set(), 128, None),
    )
    for flags, hidden, dtype in cases:
        monkeypatch.setattr(devices, "cpu_flags", lambda flags=flags: set(flags))
        config = small(run={"amp": "auto"}, model={"hidden": hidden})
        trainer = Trainer(config, warn=lambda *_: None)
        assert trainer.ctx.amp_dtype is dtype, (flags, hidden)
    with pytest.raises(cfg.ConfigError, match="auto, off, bf16, fp16"):
        small(run={"amp": "bfloat16"})
    with pytest.raises(cfg.ConfigError, match="needs device cuda"):
        Trainer(small(run={"amp": "fp16"}), warn=lambda *_: None)


def test_first_log_line_names_the_updates_precision(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512_bf16"})
    assert "| bf16 update" in Trainer(small(run={"amp": "bf16"}), warn=print).describe()
    assert "bf16" not in Trainer(small(run={"amp": "off"}), warn=print).describe()
    assert "bf16" not in Trainer(small(run={"amp": "auto"}), warn=print).describe()  # 16 wide


@pytest.fixture
def four_cores(monkeypatch):
    """A machine of four cores to size threads on; the suite's thread counts come back after."""
    import numba

    monkeypatch.setattr(context.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    threads = torch.get_num_threads(), numba.get_num_threads()
    yield min(4, numba.config.NUMBA_NUM_THREADS)
    torch.set_num_threads(threads[0])
    numba.set_num_threads(threads[1])


def test_setup_threads_takes_one_thread_for_small_steps_where_the_config_says_0(four_cores):
    import numba

    auto, two = cfg.RunConfig(), cfg.RunConfig(torch_threads=2, numba_threads=2)
    below, at = context.SMALL_STEP_WORK - 1, context.SMALL_STEP_WORK
    for settings, work, expected in (
        (auto, at, (4, four_cores)),  # one per core
        (auto, None, (4, four_cores)),  # size unknown yet
        (auto, below, (1, 1)),
        (two, below, (2, min(2, four_cores))),  # a count in the config is kept
    ):
        context.setup_threads(settings, 1, work)
        assert (torch.get_num_threads(), numba.get_num_threads()) == expected, (settings, work)
    context.setup_threads(auto, 2, at)  # two ranks on the machine share its cores
    assert torch.get_num_threads() == 2


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


def test_initial_weights_do_not_depend_on_the_thread_count():
    """Networks are initialised on one thread, so runs that differ only in threads start alike
    (orthogonal initialisation rounds differently on two threads)."""
    weights = []
    for threads in (1, 2):
        config = small(run={"torch_threads": threads}, model={"hidden": 64})
        trainer = Trainer(config, warn=lambda *_: None)
        weights.append([p.detach().clone() for p in trainer.policy.parameters()])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)


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

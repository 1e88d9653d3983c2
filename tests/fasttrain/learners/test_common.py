"""The update step's speed options: run.amp = "auto", the compiled step, Adam and Muon."""

import pytest
import torch

from fasttrain import config as cfg
from fasttrain import device as devices
from fasttrain.device import Device, native_bf16, resolve_amp
from fasttrain.learners import LEARNERS, common
from fasttrain.learners.common import Optimizers, make_optimizer
from fasttrain.learners.ppo import Trainer
from fasttrain.models import make_policy
from fasttrain.runner import run

CPU = Device(torch.device("cpu"), "cpu")
SMALL = {
    "game": {
        "snake": {
            "height": 6,
            "width": 6,
            "ppo": {"num_envs": 16, "num_steps": 8, "num_minibatches": 2, "update_epochs": 1},
        }
    },
    "model": {"hidden": 16},
    "log": {"progress": False},
}


def small(**extra):
    return cfg.from_dict(cfg.merge(SMALL, extra))


# ------------------------------------------------------------------ run.amp = "auto"


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"fpu", "avx2", "avx512f"}, "off"),  # AVX-512 without BF16: emulated, slower
        ({"fpu", "avx512f", "avx512_bf16"}, "bf16"),  # Zen 4, Cooper Lake
        ({"fpu", "amx_tile", "amx_bf16"}, "bf16"),  # Sapphire Rapids
        ({"fp", "asimd", "bf16"}, "bf16"),  # Arm with BF16 (Graviton 3, Apple M2 under Linux)
        (set(), "off"),  # no /proc/cpuinfo
    ],
)
def test_amp_auto_picks_bf16_only_on_cpus_that_compute_it(monkeypatch, flags, expected):
    monkeypatch.setattr(devices, "cpu_flags", lambda: set(flags))
    assert native_bf16(CPU) is (expected == "bf16")
    assert resolve_amp("auto", CPU) == expected
    # an explicit choice is kept whatever the CPU
    assert resolve_amp("off", CPU) == "off"
    assert resolve_amp("bf16", CPU) == "bf16"


@pytest.mark.parametrize("major, expected", [(7, "off"), (8, "bf16"), (9, "bf16")])
def test_amp_auto_on_gpus_by_compute_capability(monkeypatch, major, expected):
    gpu = Device(torch.device("cuda", 0), "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    assert resolve_amp("auto", gpu) == expected
    assert resolve_amp("fp16", gpu) == "fp16"


def test_cpu_flags_reads_this_machine():
    flags = devices.cpu_flags()
    with open("/proc/cpuinfo") as f:
        text = f.read()
    for flag in ("avx512_bf16", "avx2", "sse2"):
        assert (flag in flags) == (f" {flag}" in text)


@pytest.mark.parametrize(
    "width, expected", [(32, "off"), (64, "off"), (128, "bf16"), (256, "bf16")]
)
def test_amp_auto_on_a_bf16_cpu_skips_narrow_networks(monkeypatch, width, expected):
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512_bf16"})
    assert resolve_amp("auto", CPU, width) == expected
    assert resolve_amp("bf16", CPU, width) == "bf16"  # asked for, it is kept
    gpu = Device(torch.device("cuda", 0), "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert resolve_amp("auto", gpu, width) == "bf16"  # tensor cores: any width


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


# ------------------------------------------------------------------ the observation encoder


def test_uint8_encoder_is_log1p_of_every_byte_and_leaves_its_input_alone():
    from fasttrain.models import ObsEncoder

    grid = torch.arange(256, dtype=torch.uint8).view(4, 8, 8)
    encoded = ObsEncoder(uint8_input=True)(grid)
    assert encoded.dtype == torch.float32
    torch.testing.assert_close(encoded, torch.log1p(grid.float()))
    assert torch.equal(grid, torch.arange(256, dtype=torch.uint8).view(4, 8, 8))
    floats = grid.float()  # an already float input (as play may pass) is not written to
    torch.testing.assert_close(ObsEncoder(uint8_input=True)(floats), torch.log1p(grid.float()))
    assert torch.equal(floats, grid.float())
    # under autograd too (the update's forward)
    weight = torch.ones(256, requires_grad=True)
    (ObsEncoder(uint8_input=True)(grid).view(-1) * weight).sum().backward()
    torch.testing.assert_close(weight.grad, torch.log1p(torch.arange(256.0)))


# ------------------------------------------------------------------ the compiled update step


def test_compiled_update_equals_eager_update_on_a_fixed_batch():
    """torch.compile of the whole step (loss, backward, clipping, Adam) moves the weights as
    the eager step does, within float tolerance, over several steps."""
    trainers = {}
    for mode in ("off", "default"):
        warnings = []
        trainer = Trainer(small(run={"amp": "off", "compile": mode}), warn=warnings.append)
        if trainer.deferred is not None:  # the compiled steps at once, not after eager ones
            trainer.deferred.finish()
        assert not [w for w in warnings if w.startswith("warning")], warnings  # a compiler is
        trainer.rollout()  # present on every machine CI runs on
        trainer.compute_advantages()
        trainers[mode] = trainer
    eager, compiled = trainers["off"], trainers["default"]
    same = (
        torch.equal(getattr(eager.storage, k), getattr(compiled.storage, k))
        for k in ("obs", "actions")
    )
    assert all(same)
    before = [p.detach().clone() for p in eager.policy.parameters()]
    losses = {mode: trainer.update() for mode, trainer in trainers.items()}
    assert compiled.train_step.compiled and not compiled.train_step.deferred  # compiled ran
    for a, b, start in zip(
        eager.policy.parameters(), compiled.policy.parameters(), before, strict=True
    ):
        assert not torch.equal(a, start)  # the step moved the weights
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for key in losses["off"]:
        assert losses["default"][key] == pytest.approx(losses["off"][key], rel=1e-3, abs=1e-5)


# ------------------------------------------------------------------ run.compile = "auto"


@pytest.mark.parametrize(
    "device, steps, learner, recurrent, width, compiler, expected",
    [
        ("cpu", devices.COMPILE_MIN_STEPS, "ppo", False, 128, True, "default"),  # a long run
        ("cpu", devices.COMPILE_MIN_STEPS, "ppo", False, 256, True, "default"),
        ("cpu", devices.COMPILE_MIN_STEPS - 1, "ppo", False, 128, True, "off"),  # too short
        ("cpu", 10**8, "ppo", False, 512, True, "off"),  # matrix-bound: no faster compiled
        ("cpu", 10**8, "ppo", False, 128, False, "off"),  # no C++ compiler: eager, no warning
        ("cpu", 10**8, "ppo", True, 128, True, "off"),  # recurrent policies: not measured
        ("cpu", 10**8, "dqn", False, 128, True, "off"),  # DQN: not measured faster
        ("cuda", 10**8, "ppo", False, 128, True, "off"),  # GPUs: not measured
    ],
)
def test_compile_auto_compiles_only_long_feed_forward_ppo_runs_on_a_cpu(
    monkeypatch, device, steps, learner, recurrent, width, compiler, expected
):
    monkeypatch.setattr(devices, "cpp_compiler", lambda: "/usr/bin/g++" if compiler else None)
    where = Device(torch.device(device), device)
    args = (where, steps, LEARNERS[learner].auto_compile, recurrent, width)
    assert devices.resolve_compile("auto", *args) == expected
    monkeypatch.setattr(devices, "dynamo_supported", lambda: False)  # e.g. torch 2.3, Py 3.12
    assert devices.resolve_compile("auto", *args) == "off"
    for mode in ("off", "default", "max-autotune"):  # an explicit choice is kept
        assert devices.resolve_compile(mode, *args) == mode


def test_compiled_tanh_uses_inductors_decomposition_and_stays_close(monkeypatch):
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config.cpp, "use_decompose_tanh"):
        pytest.skip("this torch has no cpp.use_decompose_tanh (it decomposes tanh already)")
    monkeypatch.delenv("TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH", raising=False)
    monkeypatch.setattr(inductor_config.cpp, "use_decompose_tanh", False)
    if devices.cpp_compiler() is None or not devices.dynamo_supported():
        pytest.skip("torch.compile needs a C++ compiler on the CPU")
    step = common.CompiledStep(common.call_module, torch.tanh, "default", warn=pytest.fail)
    assert inductor_config.cpp.use_decompose_tanh is True
    x = torch.linspace(-20, 20, 4001)
    torch.testing.assert_close(step(x), torch.tanh(x), rtol=0, atol=1e-6)
    assert step.compiled
    # the user's own choice stands
    monkeypatch.setattr(inductor_config.cpp, "use_decompose_tanh", False)
    monkeypatch.setenv("TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH", "0")
    common.CompiledStep(common.call_module, torch.tanh, "default", warn=pytest.fail)
    assert inductor_config.cpp.use_decompose_tanh is False


FRAMES = (("frames", "total"), ("frames", "ok"))


def test_many_trainers_in_one_process_each_get_a_compiled_step(monkeypatch):
    """Each CompiledStep's function guards on its own objects (here an optimizer, as a
    trainer's), so bench repeats and sweep trials in one process compile anew each time: past
    dynamo's default of 8 per function they would fall back to eager."""
    from torch._dynamo.utils import counters

    real_compile = torch.compile
    # dynamo's tracing and guards without inductor's code generation: fast enough for a test
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None: real_compile(fn, backend="eager"))
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            monkeypatch.setattr(torch._dynamo.config, name, getattr(torch._dynamo.config, name))
    torch._dynamo.reset()

    class Trainer:  # an optimizer of its own, which the compiled step guards on
        def __init__(self):
            self.weight = torch.nn.Parameter(torch.ones(2))
            self.optimizer = torch.optim.SGD([self.weight], lr=0.5)

        def step(self, x):
            loss = (x * self.weight).sum()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            return loss.detach()

    graphs, frames, ok = (counters[k][n] for k, n in (("stats", "unique_graphs"), *FRAMES))
    x = torch.ones(3, 2)
    for _ in range(12):
        trainer = Trainer()
        step = common.CompiledStep(Trainer.step, trainer, "default", warn=pytest.fail)
        assert step(x) == 6.0 and torch.equal(trainer.weight.detach(), torch.full((2,), -0.5))
    # a graph for each (past the limit a trainer's step would run eagerly, a frame failing)
    assert counters["stats"]["unique_graphs"] - graphs >= 12
    assert counters["frames"]["total"] - frames == counters["frames"]["ok"] - ok
    torch._dynamo.reset()


def test_cpp_compiler_follows_cxx(monkeypatch, tmp_path):
    fake = tmp_path / "my-c++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert devices.cpp_compiler() == str(fake)
    monkeypatch.setenv("CXX", str(tmp_path / "missing"))
    assert devices.cpp_compiler() is None


def test_compile_auto_reaches_the_trainer_and_its_first_log_line(monkeypatch):
    monkeypatch.setattr(devices, "cpp_compiler", lambda: "/usr/bin/g++")
    compiled = torch.compile
    calls = []

    def spy(fn, mode=None):
        calls.append(mode)
        return compiled(fn, mode=mode)

    monkeypatch.setattr(torch, "compile", spy)
    for steps, mode in ((devices.COMPILE_MIN_STEPS, "default"), (4096, "off")):
        calls.clear()
        config = small(run={"compile": "auto"}, ppo={"total_timesteps": steps})
        trainer = Trainer(config, warn=lambda *_: None)
        assert trainer.compile_mode == mode
        assert calls == ([None, None] if mode == "default" else [])  # the network and the step
        assert ("torch.compile (default)" in trainer.describe()) is (mode == "default")
    with pytest.raises(cfg.ConfigError, match="auto, off, default, reduce-overhead"):
        small(run={"compile": "yes"})


# ------------------------------------------------------------------ optimizers


def test_muon_steps_hidden_matrices_and_adam_the_rest():
    policy = make_policy((4, 6, 6), torch.uint8, 4, cfg.ModelConfig(hidden=16))
    optimizer = make_optimizer("muon", policy, 1e-3)
    assert isinstance(optimizer, Optimizers)
    muon, adam = optimizer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adam, torch.optim.Adam)
    muon_params = {id(p) for g in muon.param_groups for p in g["params"]}
    for name, p in policy.named_parameters():
        expected = name.startswith("torso.") and p.ndim == 2
        assert (id(p) in muon_params) is expected, name
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(policy.parameters()))
    # one step changes every parameter; the state dict round-trips into a fresh optimizer
    obs = torch.randint(0, 2, (8, 4, 6, 6), dtype=torch.uint8)
    logits, values, _ = policy(obs)
    (logits.square().mean() + values.square().mean()).backward()
    before = [p.detach().clone() for p in policy.parameters()]
    optimizer.step()
    assert all(not torch.equal(p, b) for p, b in zip(policy.parameters(), before, strict=True))
    fresh = make_optimizer("muon", policy, 1e-3)
    fresh.load_state_dict(optimizer.state_dict())
    assert set(map(id, fresh.state)) == set(map(id, optimizer.state))
    # the rates are tensors a schedule fills in place (a float would recompile each iteration)
    rate = fresh.param_groups[0]["lr"]
    assert all(torch.is_tensor(g["lr"]) for g in fresh.param_groups)
    common.set_learning_rate(fresh, 5e-4)
    assert fresh.param_groups[0]["lr"] is rate
    assert all(float(g["lr"]) == pytest.approx(5e-4) for g in fresh.param_groups)
    with pytest.raises(ValueError):
        fresh.load_state_dict(make_optimizer("adam", policy, 1e-3).state_dict())


def test_adam_and_muon_checkpoints_do_not_mix(tmp_path):
    config = small(game={"snake": {"ppo": {"total_timesteps": 256}}})
    run(config, out=tmp_path / "adam", echo=lambda *_: None)
    muon = small(game={"snake": {"ppo": {"total_timesteps": 512, "optimizer": "muon"}}})
    with pytest.raises(cfg.ConfigError, match="optimizer"):
        run(muon, resume=tmp_path / "adam", echo=lambda *_: None)


def test_unknown_optimizer_is_one_line():
    with pytest.raises(cfg.ConfigError, match="adam, muon"):
        small(ppo={"optimizer": "sgd"})


@pytest.mark.slow
def test_muon_trains_cartpole(tmp_path):
    """PPO with optimizer = "muon" and the cartpole defaults reaches a mean return of 400."""
    config = cfg.from_dict(
        {
            "game": {"name": "cartpole", "cartpole": {"ppo": {"optimizer": "muon"}}},
            "log": {"progress": False},
        }
    )
    summary = run(config, out=tmp_path / "muon", echo=lambda *_: None)
    assert summary["episodic_return"] >= 400, summary


# ------------------------------------------------------------------ threads for the run's size


@pytest.fixture
def four_cores(monkeypatch):
    """A machine of four cores to size threads on; the suite's thread counts come back after."""
    import numba

    monkeypatch.setattr(common.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    threads = torch.get_num_threads(), numba.get_num_threads()
    yield min(4, numba.config.NUMBA_NUM_THREADS)
    torch.set_num_threads(threads[0])
    numba.set_num_threads(threads[1])


def test_setup_threads_takes_one_thread_for_small_steps_where_the_config_says_0(four_cores):
    import numba

    auto, two = cfg.RunConfig(), cfg.RunConfig(torch_threads=2, numba_threads=2)
    below, at = common.SMALL_STEP_WORK - 1, common.SMALL_STEP_WORK
    for settings, work, expected in (
        (auto, at, (4, four_cores)),  # one per core
        (auto, None, (4, four_cores)),  # size unknown yet
        (auto, below, (1, 1)),
        (two, below, (2, min(2, four_cores))),  # a count in the config is kept
    ):
        common.setup_threads(settings, 1, work)
        assert (torch.get_num_threads(), numba.get_num_threads()) == expected, (settings, work)
    common.setup_threads(auto, 2, at)  # two ranks on the machine share its cores
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(
    "game, algo, small",
    [("cartpole", "ppo", True), ("cartpole", "dqn", True), ("snake", "ppo", False)],
)
def test_trainers_size_threads_by_rows_times_weights(monkeypatch, four_cores, game, algo, small):
    """CartPole's default networks stepping 64 (PPO) or 16 (DQN) rows are small; Snake's 512
    rows of a 576-input network are not."""
    seen = []
    setup = common.setup_threads
    monkeypatch.setattr(common, "setup_threads", lambda *a: seen.append(a) or setup(*a))
    config = cfg.from_dict({"game": {"name": game}, "run": {"algo": algo}})
    trainer = LEARNERS[algo].trainer(config, warn=lambda *_: None)
    network = trainer.policy if algo == "ppo" else trainer.q_network
    weights = sum(p.numel() for p in network.parameters() if p.ndim > 1)
    assert seen[-1][2] == trainer.env.num_rows * weights  # the last call sized them
    assert (seen[-1][2] < common.SMALL_STEP_WORK) is small
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

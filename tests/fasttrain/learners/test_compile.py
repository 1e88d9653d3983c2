"""torch.compile of ``fasttrain/learners/compile.py``: the compiled step equals the eager one, its
settings (fast tanh, a compile per trainer), and the background compile: a run that compiles
trains eagerly while its steps compile in the background, and switches at a fixed iteration;
the switch waits for a slow compile, so results never depend on its time."""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest
import torch

from fasttrain import device as devices
from fasttrain.config import resolve as cfg
from fasttrain.learners import base
from fasttrain.learners import compile as compiling
from fasttrain.learners.compile import CompiledStep, call_module
from fasttrain.learners.ppo import Trainer
from tests.conftest import small_snake as snake
from tests.fasttrain.learners.test_ppo import TINY_SETS


def config(mode: str, steps: int = 40 * 128, optimizer: str = "adam") -> cfg.Config:
    ppo = {"num_envs": 16, "num_steps": 8, "total_timesteps": steps, "optimizer": optimizer}
    return cfg.from_dict(
        {
            "run": {"compile": mode, "amp": "off", "torch_threads": 1, "numba_threads": 1},
            "game": {"name": "cartpole", "cartpole": {"ppo": ppo}},
            "model": {"hidden": 16},
        }
    )


def train(trainer, iterations: int) -> list[torch.Tensor]:
    for _ in range(iterations):
        trainer.iterate()
    return [p.detach().clone() for p in trainer.policy.parameters()]


def test_the_steps_switch_at_a_fixed_iteration_and_update_as_eager_ones_do():
    said = []
    deferred = Trainer(config("default"), warn=said.append)
    assert deferred.deferred.switch_at == 40 // compiling.DEFER_SHARE == 2
    assert deferred.train_step.deferred and deferred.act_policy.deferred  # eager meanwhile
    eager = Trainer(config("off"), warn=lambda *_: None)
    assert deferred.deferred is not None and eager.deferred is None
    a, b = train(deferred, 6), train(eager, 6)
    assert not deferred.train_step.deferred and deferred.train_step.compiled  # switched
    assert any("compiled steps from iteration 2 on" in line for line in said), said
    for x, y in zip(a, b, strict=True):  # compiled arithmetic: equal within float tolerance
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_after_the_switch_nothing_compiles_again(optimizer):
    """The background compile ran on copies of the network and optimizer; the switch hands the
    run those objects (holding its own values), so the compiled step fits them as it is."""
    from torch._dynamo.utils import counters

    if optimizer == "muon" and not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon needs torch >= 2.9")
    trainer = Trainer(config("default", optimizer=optimizer), warn=lambda *_: None)
    train(trainer, 2)  # eager, before the switch at iteration 2
    trainer.deferred.thread.join()
    graphs, frames = counters["stats"]["unique_graphs"], dict(counters["frames"])
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    moments = [
        {k: v.clone() for k, v in trainer.optimizer.state[p].items()}
        for p in trainer.policy.parameters()
    ]
    trainer.deferred.at(trainer.iteration)  # the switch: the run's values move over
    after = [p.detach() for p in trainer.policy.parameters()]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
    for p, saved in zip(trainer.policy.parameters(), moments, strict=True):
        state = trainer.optimizer.state[p]  # the optimizer holds the module's new parameters
        assert state.keys() == saved.keys() and saved
        assert all(torch.equal(state[k], v) for k, v in saved.items())
    train(trainer, 4)
    assert trainer.train_step.compiled and not trainer.train_step.deferred
    assert counters["stats"]["unique_graphs"] == graphs, (frames, dict(counters["frames"]))


def test_a_switch_before_any_step_compiles_nothing_again_either():
    """``fasttrain bench`` switches before the first update (``finish``): the optimizer has no
    state yet, so the copy's state is zeroed in place (what a first step starts from); and the
    annealed learning rate is a tensor, so changing it compiles nothing."""
    from torch._dynamo.utils import counters

    def snake(mode: str) -> cfg.Config:
        settings = {"num_envs": 16, "num_steps": 8, "total_timesteps": 40 * 128}
        run = {"compile": mode, "amp": "off", "torch_threads": 1, "numba_threads": 1}
        game = {"name": "snake", "snake": {"height": 6, "width": 6, "ppo": settings}}
        return cfg.from_dict({"run": run, "game": game, "model": {"hidden": 32}})

    trainer = Trainer(snake("default"), warn=lambda *_: None)
    trainer.deferred.finish()
    state = [v for s in trainer.optimizer.state.values() for v in s.values()]
    assert state and all(int(torch.count_nonzero(v)) == 0 for v in state if torch.is_tensor(v))
    eager = Trainer(snake("off"), warn=lambda *_: None)
    trainer.iterate()  # the first compiled call
    graphs = counters["stats"]["unique_graphs"]
    a, b = train(trainer, 3), train(eager, 4)
    assert counters["stats"]["unique_graphs"] == graphs
    for x, y in zip(a, b, strict=True):  # zeroed state steps as a fresh optimizer's first step
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_the_background_compile_runs_with_fasttrains_compile_settings(monkeypatch):
    """torch keeps dynamo's and inductor's settings per thread: the compile thread must set the
    recompile limit (else a process that builds several trainers falls back to eager) and the
    fast tanh itself."""
    import torch._inductor.config as inductor_config

    seen = {}

    def record(self):
        seen["limit"] = torch._dynamo.config.recompile_limit
        seen["tanh"] = getattr(inductor_config.cpp, "use_decompose_tanh", True)

    monkeypatch.delenv("TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH", raising=False)
    monkeypatch.setattr(Trainer, "precompile", record)
    trainer = Trainer(config("default"), warn=lambda *_: None)
    trainer.deferred.thread.join()
    assert seen == {"limit": compiling.RECOMPILE_LIMIT, "tanh": True}


def test_a_slow_compile_makes_the_switch_wait_and_changes_no_weight(monkeypatch):
    fast = train(Trainer(config("default"), warn=lambda *_: None), 6)
    precompile = Trainer.precompile

    def slow(self):
        time.sleep(3.0)  # longer than the eager iterations before the switch
        precompile(self)

    monkeypatch.setattr(Trainer, "precompile", slow)
    trainer = Trainer(config("default"), warn=lambda *_: None)
    slowed = train(trainer, 6)
    assert trainer.deferred.waited_s > 1.0  # the switch waited for the compile
    for x, y in zip(fast, slowed, strict=True):
        assert torch.equal(x, y)


def test_a_compile_that_fails_in_the_background_runs_on_eagerly_with_one_warning(monkeypatch):
    def broken(self):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(Trainer, "precompile", broken)
    said = []
    trainer = Trainer(config("default"), warn=said.append)
    train(trainer, 4)
    assert not trainer.train_step.compiled and not trainer.act_policy.compiled
    warnings = [line for line in said if line.startswith("warning: torch.compile")]
    assert len(warnings) == 1 and "no C++ compiler here" in warnings[0]


@pytest.mark.parametrize("mode", ["off"])
def test_an_eager_run_starts_no_background_compile(mode):
    assert Trainer(config(mode), warn=lambda *_: None).deferred is None


def trace_in_a_thread_while(work) -> None:
    """Run ``work()`` in this thread while another thread is inside ``torch.fx`` tracing (its
    patches of ``nn.Module.__call__`` installed), as inductor does while it compiles."""
    inside, done = threading.Event(), threading.Event()

    class Traced(torch.nn.Module):
        def forward(self, x):
            inside.set()
            done.wait(30)
            return x + 1

    tracer = threading.Thread(target=torch.fx.symbolic_trace, args=(Traced(),))
    tracer.start()
    try:
        assert inside.wait(30)
        work()
    finally:
        done.set()
        tracer.join()


def test_an_eager_forward_while_another_thread_traces_is_left_alone():
    compiling._fx_patches_for_their_own_thread()  # what a background compile installs
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())
    x = torch.ones(2, 3)
    expected = net(x)
    out = []
    trace_in_a_thread_while(lambda: out.append(net(x)))
    assert torch.equal(out[0], expected)


def test_a_new_trainer_waits_for_an_earlier_trainers_background_compile(monkeypatch):
    """A trainer dropped before its switch leaves its compile running; the next trainer seeds
    torch and builds its networks only once it is done, so its first weights are those of a
    process that compiled nothing."""
    fresh = [p.detach().clone() for p in Trainer(config("off")).policy.parameters()]
    release, events = threading.Event(), []
    slow, seed = CompiledStep.precompile, torch.manual_seed

    def wait_then_compile(self, owner, *args):
        release.wait(30)
        torch.rand(1000)  # what a compile may draw from torch's global stream
        events.append("compiled")
        return slow(self, owner, *args)

    monkeypatch.setattr(CompiledStep, "precompile", wait_then_compile)
    monkeypatch.setattr(torch, "manual_seed", lambda s: events.append("seed") or seed(s))
    dropped = Trainer(config("default"))
    assert dropped.deferred is not None and dropped.deferred.thread.is_alive()
    events.clear()
    threading.Timer(1.0, release.set).start()
    again = [p.detach().clone() for p in Trainer(config("off")).policy.parameters()]
    assert events == ["compiled", "compiled", "seed"] and not compiling._COMPILES  # net, update
    assert all(torch.equal(a, b) for a, b in zip(fresh, again, strict=True))


# ------------------------------------------------------------------ the compiled update step


def test_compiled_update_equals_eager_update_on_a_fixed_batch():
    """torch.compile of the whole step (loss, backward, clipping, Adam) moves the weights as
    the eager step does, within float tolerance, over several steps."""
    trainers = {}
    for mode in ("off", "default"):
        warnings = []
        trainer = Trainer(snake(run={"amp": "off", "compile": mode}), warn=warnings.append)
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
    losses = {mode: trainer.update()[0] for mode, trainer in trainers.items()}  # one member
    assert compiled.train_step.compiled and not compiled.train_step.deferred  # compiled ran
    for a, b, start in zip(
        eager.policy.parameters(), compiled.policy.parameters(), before, strict=True
    ):
        assert not torch.equal(a, start)  # the step moved the weights
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for key in losses["off"]:
        assert losses["default"][key] == pytest.approx(losses["off"][key], rel=1e-3, abs=1e-5)


def test_compiled_tanh_uses_inductors_decomposition_and_stays_close(monkeypatch):
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config.cpp, "use_decompose_tanh"):
        pytest.skip("this torch has no cpp.use_decompose_tanh (it decomposes tanh already)")
    monkeypatch.delenv("TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH", raising=False)
    monkeypatch.setattr(inductor_config.cpp, "use_decompose_tanh", False)
    if devices.cpp_compiler() is None or not devices.dynamo_supported():
        pytest.skip("torch.compile needs a C++ compiler on the CPU")
    step = CompiledStep(call_module, torch.tanh, "default", warn=pytest.fail)
    assert inductor_config.cpp.use_decompose_tanh is True
    x = torch.linspace(-20, 20, 4001)
    torch.testing.assert_close(step(x), torch.tanh(x), rtol=0, atol=1e-6)
    assert step.compiled
    # the user's own choice stands
    monkeypatch.setattr(inductor_config.cpp, "use_decompose_tanh", False)
    monkeypatch.setenv("TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH", "0")
    CompiledStep(call_module, torch.tanh, "default", warn=pytest.fail)
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
        step = CompiledStep(Trainer.step, trainer, "default", warn=pytest.fail)
        assert step(x) == 6.0 and torch.equal(trainer.weight.detach(), torch.full((2,), -0.5))
    # a graph for each (past the limit a trainer's step would run eagerly, a frame failing)
    assert counters["stats"]["unique_graphs"] - graphs >= 12
    assert counters["frames"]["total"] - frames == counters["frames"]["ok"] - ok
    torch._dynamo.reset()


def test_compile_auto_reaches_the_trainer_and_its_first_log_line(monkeypatch):
    monkeypatch.setattr(devices, "cpp_compiler", lambda: "/usr/bin/g++")
    compiled = torch.compile
    calls = []

    def spy(fn, mode=None):
        calls.append(mode)
        return compiled(fn, mode=mode)

    monkeypatch.setattr(torch, "compile", spy)
    monkeypatch.setattr(base, "compiled_before", lambda key: True)  # torch's cache is warm
    for steps, mode in ((devices.COMPILE_MIN_STEPS, "default"), (4096, "off")):
        calls.clear()
        config = snake(run={"compile": "auto"}, ppo={"total_timesteps": steps})
        trainer = Trainer(config, warn=lambda *_: None)
        assert trainer.compile_mode == mode
        assert calls == ([None, None] if mode == "default" else [])  # the network and the step
        assert ("torch.compile (default)" in trainer.describe()) is (mode == "default")
        assert "eager" not in trainer.describe()
    with pytest.raises(cfg.ConfigError, match="auto, off, default, reduce-overhead"):
        snake(run={"compile": "yes"})


def test_a_first_compile_is_skipped_where_the_run_is_too_short_for_it_to_pay(monkeypatch):
    """With none of a run's steps in torch's cache, ``auto`` compiles only runs whose learner
    arithmetic is estimated at ``COLD_COMPILE_MIN_SECONDS`` or more, and says so on the first
    line; a compile asked for by name compiles whatever the cache holds."""
    monkeypatch.setattr(devices, "cpp_compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None: fn)
    asked = []
    monkeypatch.setattr(base, "compiled_before", lambda key: asked.append(key) or False)
    short, auto = devices.COMPILE_MIN_STEPS, {"compile": "auto"}
    trainer = Trainer(snake(run=auto, ppo={"total_timesteps": short}), warn=lambda *_: None)
    assert trainer.compile_mode == "off" and asked == [trainer.compile_key]
    assert f"| eager: a first compile (none cached) does not pay in {short:,} steps" in (
        trainer.describe()
    )
    weights = sum(p.numel() for p in trainer.network.parameters())
    passes = 1 + 3 * trainer.args.update_epochs
    per_step = 2 * weights * passes / (compiling.ASSUMED_GFLOPS * 1e9)
    enough = int(compiling.COLD_COMPILE_MIN_SECONDS / per_step) + 1
    long = Trainer(snake(run=auto, ppo={"total_timesteps": enough}), warn=print)
    assert long.compile_mode == "default" and "eager" not in long.describe()
    named = Trainer(snake(run={"compile": "default"}, ppo={"total_timesteps": short}), warn=print)
    assert named.compile_mode == "default"


def test_the_estimate_sends_cartpole_eager_and_snake_and_minatar_to_a_first_compile():
    """By arithmetic, the runs measured (docs/performance.md#torchcompile): CartPole at
    PufferLib's settings (a layer of 128, 10M steps, one epoch) is seconds of arithmetic;
    Snake's default (576 -> 128 -> 128, 50M steps, two epochs) and a MinAtar game's (400 ->
    256 -> 256, 10M steps) are hundreds."""
    least = compiling.COLD_COMPILE_MIN_SECONDS
    cartpole = 4 * 128 + 128 + 128 * 2 + 2 + 128 + 1
    snake_net = 576 * 128 + 128 + 128 * 128 + 128 + 128 * 4 + 4 + 128 + 1
    minatar = 400 * 256 + 256 + 256 * 256 + 256 + 256 * 6 + 6 + 256 + 1
    assert compiling.arithmetic_seconds(cartpole, 10_000_000, 1) < least / 10
    assert compiling.arithmetic_seconds(snake_net, 50_000_000, 2) > 5 * least
    assert compiling.arithmetic_seconds(snake_net, 30_000_000, 1) > 2 * least  # the fp32 variant
    assert compiling.arithmetic_seconds(minatar, 10_000_000, 2) > 2 * least


def test_a_finished_background_compile_marks_its_steps_compiled(tmp_path, monkeypatch):
    """The mark is what makes the next run's cache warm: written once the compile succeeded,
    in the folder torch compiles into, under the key of the run's settings."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    config = snake(ppo={"total_timesteps": 4096})
    key = compiling.compile_key(config, "fp32")
    assert key == compiling.compile_key(config, "fp32")  # the same settings, the same steps
    assert key != compiling.compile_key(config, "bf16")
    other = snake(ppo={"total_timesteps": 4096}, model={"hidden": 32})
    assert key != compiling.compile_key(other, "fp32")
    assert not compiling.compiled_before(key)
    failed = compiling.DeferredCompile([], 0, say=lambda *_: None, key=key)
    failed.start(lambda: 1 / 0)
    failed.at(0)
    assert not compiling.compiled_before(key)  # a failed compile marks nothing
    done = compiling.DeferredCompile([], 0, say=lambda *_: None, key=key)
    done.start(lambda: None)
    done.at(0)
    assert compiling.compiled_before(key) and (tmp_path / "fasttrain-compiled" / key).is_file()


# ------------------------------------------------------------------ exits during the compile


def test_the_command_exits_at_once_with_its_code_while_a_compile_runs(monkeypatch):
    """``fasttrain``'s exit with a background compile still running is ``os._exit`` with the
    command's code (Python's own exit finalizes the interpreter under the compile thread and
    can abort); with none running it is the ordinary ``SystemExit``, but for a run a signal
    stopped (130 / 143), which leaves at once too (``startup.leave``: a second signal during
    Python's finalizing would end it by the signal)."""
    from fasttrain import cli
    from fasttrain.run import startup

    exits = []
    monkeypatch.setattr(compiling.os, "_exit", exits.append)
    monkeypatch.setattr(startup, "_held", False)  # entry() holds exit_now: not for pytest
    monkeypatch.setattr(cli, "main", lambda: sys.exit(1))
    with pytest.raises(SystemExit) as ordinary:
        cli.entry()
    assert ordinary.value.code == 1 and exits == []
    monkeypatch.setattr(cli, "main", lambda: sys.exit(143))
    with pytest.raises(SystemExit):  # the patched os._exit returns; sys.exit follows
        cli.entry()
    assert exits == [143]
    exits.clear()
    release = threading.Event()
    compile_thread = threading.Thread(target=release.wait, args=(30,), daemon=True)
    compile_thread.start()
    monkeypatch.setattr(compiling, "_COMPILES", [compile_thread])
    try:
        with pytest.raises(SystemExit):  # the patched os._exit returns; sys.exit follows
            cli.entry()
        monkeypatch.setattr(cli, "main", lambda: sys.exit("one line"))
        with pytest.raises(SystemExit):
            cli.entry()
    finally:
        release.set()
        compile_thread.join()
    assert exits == [143, 1]


SIGNALLED_SETS = [
    *(item for item in TINY_SETS if not item.startswith("run.compile=")),
    "log.curves=false",
    "run.torch_threads=1",
    "run.numba_threads=1",
    "run.compile=default",  # the background compile, switching at iteration 1,000
]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_the_background_compile_saves_and_exits_with_its_code(signum, tmp_path):
    """A run signalled while its steps compile in the background saves, then exits 143 / 130,
    every time (it aborted with exit 134 in 2 of 3 tries: repeated to catch that)."""
    from fasttrain.run import checkpoint
    from tests.cli import finish, start_cli

    code = {signal.SIGTERM: 143, signal.SIGINT: 130}[signum]
    flags = [arg for item in SIGNALLED_SETS for arg in ("--set", item)]
    for k, delay in enumerate((0.0, 0.3, 0.6, 1.0)):
        out = tmp_path / f"run{k}"
        proc = start_cli("run", "--steps", 128 * 20_000, "--out", out, *flags)
        deadline = time.monotonic() + 120
        rows = out / "metrics.csv"  # its header comes with the first row, after the handlers
        while not (rows.exists() and rows.stat().st_size) and proc.poll() is None:
            assert time.monotonic() < deadline, "no metrics row in time"
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signum)
        result = finish(proc)
        assert "torch.compile (default)" in result.stdout  # it compiles in the background
        assert "warning: torch.compile" not in result.stdout
        assert "compiled steps from iteration" not in result.stdout  # before the switch
        assert result.returncode == code, (delay, result.returncode, result.stderr[-800:])
        assert result.stderr.strip() == "", result.stderr[-800:]
        name = signum.name
        assert f"interrupted ({name}): checkpoint saved at step" in result.stdout
        state = checkpoint.load(out)
        assert state["global_step"] > 0 and state["global_step"] % 128 == 0
        assert all(torch.isfinite(t).all() for t in state["model"].values())


# ------------------------------------------------------------------ inductor's vector width


@pytest.mark.parametrize(
    "capability, env, expected",
    [
        ("AVX512", {}, compiling.CPU_SIMD_BITS),  # torch's AVX-512 kernels: 256-bit code
        ("AVX2", {}, None),  # inductor's own choice, AVX2's already (FASTTRAIN_CPU=avx2 too)
        ("DEFAULT", {}, None),  # ATEN_CPU_CAPABILITY=default: inductor follows it
        ("AVX512", {"TORCHINDUCTOR_CPP_SIMDLEN": "512"}, None),  # the user's choice wins
    ],
)
def test_inductor_writes_256_bit_code_where_torch_runs_avx512(
    monkeypatch, capability, env, expected
):
    """Inductor's AVX-512 code corrupted the heap of Snake's default run (torch 2.13, AMD EPYC
    with AVX-512 BF16): its CPU loops stay 256 bits wide there."""
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor.cpp, "simdlen", None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.delenv("TORCHINDUCTOR_CPP_SIMDLEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    compiling.compile_settings()
    assert inductor.cpp.simdlen == expected


@pytest.mark.slow
def test_snakes_default_run_compiles_and_switches_without_corrupting_the_heap(tmp_path):
    """The default Snake run, cut to 3M steps: its update compiles in the background and the
    run switches to it at iteration 9. With inductor's AVX-512 code it aborted within ~10 s
    ("malloc(): unaligned tcache chunk detected"), 5 runs of 5, on AMD EPYC with AVX-512 BF16."""
    from tests.cli import cli

    quiet = ("--set", "log.curves=false", "--set", "log.progress=false")
    quiet += ("--set", "run.compile=default")  # whatever torch's cache holds
    result = cli("run", "--game", "snake", "--steps", "3000000", "--out", tmp_path / "run", *quiet)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "torch.compile (default)" in result.stdout


def test_bench_builds_its_trainers_as_on_a_warm_cache(tmp_path, monkeypatch):
    """``fasttrain bench`` times a config's steady state: inside ``as_if_cached`` a short run
    compiles as it would once the cache is warm, and outside nothing changes."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert not compiling.compiled_before("some-key")
    with compiling.as_if_cached():
        assert compiling.compiled_before("some-key")
    assert not compiling.compiled_before("some-key")

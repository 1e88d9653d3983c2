"""A run that compiles trains eagerly while its steps compile in the background, and switches at
a fixed iteration: the switch waits for a slow compile, so results never depend on its time."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from fasttrain import config as cfg
from fasttrain.learners import common
from fasttrain.learners.ppo import Trainer


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
    assert deferred.deferred.switch_at == 40 // common.DEFER_SHARE == 2
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
    assert seen == {"limit": common.RECOMPILE_LIMIT, "tanh": True}


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
    common._fx_patches_for_their_own_thread()  # what a background compile installs
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
    slow, seed = common.CompiledStep.precompile, torch.manual_seed

    def wait_then_compile(self, owner, *args):
        release.wait(30)
        torch.rand(1000)  # what a compile may draw from torch's global stream
        events.append("compiled")
        return slow(self, owner, *args)

    monkeypatch.setattr(common.CompiledStep, "precompile", wait_then_compile)
    monkeypatch.setattr(common.torch, "manual_seed", lambda s: events.append("seed") or seed(s))
    dropped = Trainer(config("default"))
    assert dropped.deferred is not None and dropped.deferred.thread.is_alive()
    events.clear()
    threading.Timer(1.0, release.set).start()
    again = [p.detach().clone() for p in Trainer(config("off")).policy.parameters()]
    assert events == ["compiled", "compiled", "seed"] and not common._COMPILES  # net, update
    assert all(torch.equal(a, b) for a, b in zip(fresh, again, strict=True))

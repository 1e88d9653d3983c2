"""The rollout horizon as one CUDA graph: graph-safe steps (checked on the CPU path, every
tier), and on a GPU (marked `gpu`) the replay against the eager rollout bit for bit."""

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fasttrain.config import resolve as cfg
from fasttrain.learners import graphs, make_trainer
from fasttrain.learners.ppo import Trainer
from tests.conftest import small_snake
from tests.fasttrain.kernels.test_cuda import gpu

# ops whose result the host must wait for (a value read back, a shape that depends on data):
# none may run inside a horizon that a CUDA graph captures
SYNCING = {
    "aten::_local_scalar_dense",  # .item(), bool(t), int(t), float(t): Python branching
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::equal",
    "aten::is_nonzero",
    "aten::repeat_interleave",
}


class OpLog(TorchDispatchMode):
    """Records every aten op that runs and the shapes of the tensors each returns."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [tuple(t.shape) for t in _tensors(out)]
        self.ops.append((func._schema.name, shapes))
        return out


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


@pytest.mark.parametrize("core", ["none", "gru"])
def test_the_rollout_horizon_is_graph_safe_on_the_cpu_path(core):
    """What a CUDA graph needs of the T steps, checked where CI runs (the CPU path runs the same
    Python): no op that synchronises with the host or returns a data-dependent shape, the same
    ops with the same shapes at every step (static: one capture serves every replay), and the
    storage written in place (its tensors keep their memory)."""
    config = small_snake(
        model={"core": core, "core_size": 16}, game={"snake": {"ppo": {"bptt_horizon": 4}}}
    )
    trainer = Trainer(config, warn=lambda *_: None)
    s = trainer.storage
    before = {name: t.data_ptr() for name, t in vars(s).items() if isinstance(t, torch.Tensor)}
    log = OpLog()
    with log:
        trainer.rollout_steps(s)
    names = {name for name, _ in log.ops}
    assert not names & SYNCING, names & SYNCING
    steps = trainer.args.num_steps
    assert len(log.ops) % steps == 0
    per_step = len(log.ops) // steps
    first = log.ops[:per_step]
    for t in range(1, steps):
        assert log.ops[t * per_step : (t + 1) * per_step] == first, t
    after = {name: t.data_ptr() for name, t in vars(s).items() if isinstance(t, torch.Tensor)}
    assert after == before
    assert bool(s.actions.ne(0).any())  # the log saw real steps


def test_pqn_rollout_steps_are_graph_safe_on_the_cpu_path():
    """PQN draws a rollout's exploration before its steps (epsilon is a float that changes each
    iteration, so it stays out of the graph); the steps themselves are graph-safe as PPO's."""
    from fasttrain.learners.pqn import Trainer as PQNTrainer

    config = small_snake(run={"algo": "pqn"}, game={"snake": {"pqn": {"num_envs": 16}}})
    trainer = PQNTrainer(config, warn=lambda *_: None)
    trainer.rollout()  # the draws
    log = OpLog()
    with log:
        trainer.rollout_steps()
    names = {name for name, _ in log.ops}
    assert not names & SYNCING, names & SYNCING
    assert not names & {"aten::rand", "aten::randint", "aten::uniform_", "aten::random_"}
    steps = trainer.args.num_steps
    per_step = len(log.ops) // steps
    assert len(log.ops) == per_step * steps
    for t in range(1, steps):
        assert log.ops[t * per_step : (t + 1) * per_step] == log.ops[:per_step], t


POPULATION_KINDS = ["ppo", "ppo-gru", "pqn"]


def small_population(kind: str, seeds=(3, 7), num_envs: int = 16, num_steps=None, **run):
    """A population of small Snake members, one per seed: ``ppo`` (feed-forward), ``ppo-gru``
    or ``pqn``."""
    section = {"num_envs": num_envs, **({"num_steps": num_steps} if num_steps else {})}
    if kind == "pqn":
        config = small_snake(run={"algo": "pqn", **run}, game={"snake": {"pqn": section}})
    else:
        core = "gru" if kind == "ppo-gru" else "none"
        config = small_snake(
            run=run,
            model={"core": core, "core_size": 16},
            game={"snake": {"ppo": {**section, "bptt_horizon": 4}}},
        )
    members = [
        dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed))
        for seed in seeds
    ]
    return make_trainer(config, warn=lambda *_: None, members=members)


@pytest.mark.parametrize("kind", POPULATION_KINDS)
def test_a_populations_rollout_is_graph_safe_on_the_cpu_path(kind):
    """A population's T steps (the members' batched forward, a PPO member's draws from its own
    stream, the env step; a PQN population's exploration is drawn before them) as the solo
    learners': no syncing op, the same ops each step, the storage written in place; on the CPU
    no graph is made."""
    population = small_population(kind)
    if kind == "pqn":
        population.rollout()  # the draws
    s = population.storage
    tensors = [name for name, t in vars(s).items() if isinstance(t, torch.Tensor)]
    steps = population.args.num_steps
    assert population.horizon_graph is None
    before = {name: getattr(s, name).data_ptr() for name in tensors}
    log = OpLog()
    with log:
        population.rollout_steps(s)
    names = {name for name, _ in log.ops}
    assert not names & SYNCING, names & SYNCING
    per_step = len(log.ops) // steps
    assert len(log.ops) == per_step * steps
    for t in range(1, steps):
        assert log.ops[t * per_step : (t + 1) * per_step] == log.ops[:per_step], t
    assert {name: getattr(s, name).data_ptr() for name in tensors} == before
    assert bool(s.actions.ne(0).any())


@pytest.mark.parametrize("kind", POPULATION_KINDS)
def test_a_populations_minibatch_step_is_graph_safe_on_the_cpu_path(kind):
    """Every member's loss, backward, per-member clipping, the population's Adam and its
    per-member NaN guard: no syncing op, the same ops from one step to the next (after the
    first), as a captured update needs; on the CPU no graph is made."""
    population = small_population(kind)
    population.rollout()
    if kind == "pqn":
        population.compute_returns()
    else:
        population.compute_advantages()
        population.prepare_batch()
    assert population.update_graph is None
    first, second = list(population.minibatches())[:2]  # each with the member axis first
    assert first.shape[0] == population.num_members
    logs = []
    for k in range(3):
        log = OpLog()
        with log:
            population.minibatch_step((first, second)[k % 2])
        logs.append(log.ops)
    names = {name for log in logs for name, _ in log}
    assert not names & SYNCING, names & SYNCING
    assert logs[1] == logs[2] and len(logs[1]) > 20


@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_a_minibatch_step_is_graph_safe_on_the_cpu_path(algo):
    """What a captured minibatch step needs (PPO's and PQN's update graphs): no op that
    synchronises or returns a data-dependent shape in the loss, backward, clipping, the NaN
    guard and the optimizer step, and the same ops with the same shapes from one step to the
    next; on the CPU no graph is made and the rates stay as they were."""
    from fasttrain.learners.pqn import Trainer as PQNTrainer

    if algo == "pqn":
        config = small_snake(run={"algo": "pqn"}, game={"snake": {"pqn": {"num_envs": 16}}})
        trainer = PQNTrainer(config, warn=lambda *_: None)
        trainer.iterate()
    else:
        trainer = Trainer(small_snake(), warn=lambda *_: None)
        trainer.iterate()
        trainer.prepare_batch()
    assert trainer.update_graph is None and not trainer.rates_on_device
    trainer.ctx.masked_steps = True  # the NaN guard as on a GPU: undone on the device, no read
    size = trainer.minibatch_size
    logs = []
    for k in range(3):  # the first makes the guard's backups: the warm-up before a capture
        mb = torch.randperm(trainer.batch_size, generator=torch.Generator().manual_seed(k))
        log = OpLog()
        with log:
            trainer.minibatch_step(mb[:size])
        logs.append(log.ops)
    names = {name for log in logs for name, _ in log}
    assert not names & SYNCING, names & SYNCING
    assert logs[1] == logs[2] and len(logs[1]) > 20
    assert "aten::_fused_adam_" in names and "aten::where" in names  # the step and its guard


def test_where_the_rollout_is_not_captured():
    """A CPU run and ``run.cuda_graph = false`` need no word; ppo.overlap and a torch without
    generator registration each get their line."""
    cuda = torch.device("cuda")
    assert graphs.graph_problem(small_snake(), torch.device("cpu")) == ""
    assert graphs.graph_problem(small_snake(run={"cuda_graph": False}), cuda) == ""
    overlap = small_snake(game={"snake": {"ppo": {"overlap": True}}})
    assert graphs.graph_problem(overlap, cuda) == graphs.EAGER_OVERLAP
    if hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        assert graphs.graph_problem(small_snake(), cuda) is None


def test_where_the_update_is_not_captured():
    """The update's own reasons: fp16's loss scaler, a data-parallel all-reduce, an optimizer
    other than the fused Adam; and the fused Adam made graph-safe keeps its numbers."""
    from types import SimpleNamespace

    plain = SimpleNamespace(scaler=None, ranks=SimpleNamespace(enabled=False))
    params = [torch.nn.Parameter(torch.ones(3))]
    fused = torch.optim.Adam(params, lr=1e-3, fused=True)
    config = small_snake()
    assert graphs.update_graph_problem(config, plain, fused) is None
    scaled = SimpleNamespace(scaler=object(), ranks=plain.ranks)
    assert "fp16" in graphs.update_graph_problem(config, scaled, fused)
    ranked = SimpleNamespace(scaler=None, ranks=SimpleNamespace(enabled=True))
    assert "data-parallel" in graphs.update_graph_problem(config, ranked, fused)
    unfused = torch.optim.Adam(params, lr=1e-3)
    assert "fused Adam" in graphs.update_graph_problem(config, plain, unfused)
    graphs.graph_safe_optimizer(fused, torch.device("cpu"))
    group = fused.param_groups[0]
    assert group["capturable"] and torch.equal(group["lr"], torch.tensor(1e-3))


def test_cuda_graph_is_a_boolean_setting():
    assert small_snake().run.cuda_graph is True
    with pytest.raises(Exception, match="cuda_graph"):
        cfg.from_dict(cfg.merge(small_snake_dict(), {"run": {"cuda_graph": "yes"}}))


def small_snake_dict():
    from tests.conftest import SMALL_SNAKE

    return SMALL_SNAKE


# ------------------------------------------------------------------------------------ GPU


def gpu_trainer(graph: bool, core: str = "none", kind: str = "auto", seed: int = 4):
    config = small_snake(
        run={"device": "cuda", "cuda_graph": graph, "amp": "off", "seed": seed},
        model={"core": core, "core_size": 16, "kind": kind},
        game={"snake": {"ppo": {"num_envs": 64, "num_steps": 16, "bptt_horizon": 8}}},
    )
    return Trainer(config, warn=lambda *_: None)


ROLLOUT = (
    "obs",
    "actions",
    "logprobs",
    "values",
    "rewards",
    "terminated",
    "truncated",
    "episode_starts",
    "advantages",
    "returns",
)


def assert_same(eager, graphed, where):
    for name in ROLLOUT:
        a, b = getattr(eager.storage, name), getattr(graphed.storage, name)
        assert torch.equal(a, b), (where, name)
    ended = eager.storage.terminated | eager.storage.truncated  # where final_obs holds one
    assert torch.equal(eager.storage.final_obs[ended], graphed.storage.final_obs[ended]), where
    weights = graphed.policy.state_dict()
    for name, a in eager.policy.state_dict().items():
        assert torch.equal(a, weights[name]), (where, name)
    assert torch.equal(eager.rollout_generator.get_state(), graphed.rollout_generator.get_state())


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("core", ["none", "gru"])
def test_graph_replay_equals_the_eager_rollout_bit_for_bit(core):
    """Same seed: the replayed horizon takes the same actions and writes the same observations,
    rewards and flags as the eager steps, iteration after iteration (the update between them
    changing the weights in place), and leaves the sampling stream where they leave it."""
    eager, graphed = gpu_trainer(False, core), gpu_trainer(True, core)
    assert eager.horizon_graph is None and graphed.horizon_graph is not None
    for i in range(4):
        eager.iterate()
        graphed.iterate()
        assert_same(eager, graphed, i)
    assert graphed.horizon_graph.captures == 1
    assert graphed.update_graph.captures == 1
    assert graphed.ctx.updates == eager.ctx.updates
    # the env's own array work (stats, state_dict) is back on torch's stream after a replay
    assert graphed.env.stream == torch.cuda.current_stream().cuda_stream


@pytest.mark.gpu
@gpu
def test_a_non_finite_step_is_skipped_inside_the_update_graph():
    """The NaN guard is part of the captured step: with a NaN loss (the entropy coefficient, a
    device tensor the graph reads) every minibatch step is undone and counted, as eagerly."""
    eager, graphed = gpu_trainer(False), gpu_trainer(True)
    results = []
    for trainer in (eager, graphed):
        trainer.iterate()
        trainer.iterate()
        before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
        trainer.ent_coef.fill_(float("nan"))
        (losses,) = trainer.iterate()  # a solo trainer's one member
        for name, value in trainer.policy.state_dict().items():
            assert torch.equal(value, before[name]), name
        results.append(losses["losses/skipped_updates"])
    assert results[0] == results[1] > 0


@pytest.mark.gpu
@gpu
def test_a_new_policy_tensor_is_captured_again():
    """Weights replaced by new tensors (a compiled step adopted, a state loaded by replacement):
    the graph would read the old memory, so the horizon is captured again."""
    eager, graphed = gpu_trainer(False), gpu_trainer(True)
    for trainer in (eager, graphed):
        trainer.iterate()
        trainer.iterate()
        for p in trainer.policy.parameters():
            p.data = p.data.clone()
        trainer.iterate()
    assert_same(eager, graphed, "after replacement")
    assert graphed.horizon_graph.captures == 2


@pytest.mark.gpu
@gpu
def test_a_resumed_graphed_run_continues_as_the_uninterrupted_one():
    whole = gpu_trainer(True)
    for _ in range(4):
        whole.iterate()
    first = gpu_trainer(True)
    for _ in range(2):
        first.iterate()
    resumed = gpu_trainer(True)
    resumed.load_state_dict(first.state_dict())
    for _ in range(2):
        resumed.iterate()
    assert_same(whole, resumed, "resumed")


@pytest.mark.gpu
@gpu
def test_the_eager_rollout_never_synchronises_on_the_gpu():
    trainer = gpu_trainer(False)
    trainer.iterate()  # lazy initialisation outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.rollout()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@gpu
def test_pqn_graph_replay_equals_the_eager_rollout_and_update_bit_for_bit():
    from fasttrain.learners.pqn import Trainer as PQNTrainer

    def trainer(graph):
        config = small_snake(
            run={"device": "cuda", "cuda_graph": graph, "amp": "off", "seed": 2, "algo": "pqn"},
            game={"snake": {"pqn": {"num_envs": 64, "num_steps": 16}}},
        )
        return PQNTrainer(config, warn=lambda *_: None)

    eager, graphed = trainer(False), trainer(True)
    assert eager.horizon_graph is None and graphed.horizon_graph is not None
    assert eager.update_graph is None and graphed.update_graph is not None
    for i in range(4):
        eager.iterate()
        graphed.iterate()
        for name in ("obs", "actions", "values", "rewards", "terminated", "truncated", "returns"):
            a, b = getattr(eager.storage, name), getattr(graphed.storage, name)
            assert torch.equal(a, b), (i, name)
        weights = graphed.q_network.state_dict()
        for name, value in eager.q_network.state_dict().items():
            assert torch.equal(value, weights[name]), (i, name)
    assert graphed.horizon_graph.captures == 1
    assert graphed.update_graph.captures == 1  # the minibatch steps replayed, the same weights
    assert graphed.ctx.updates == eager.ctx.updates
    # a resumed graphed run continues as the uninterrupted one
    resumed = trainer(True)
    resumed.load_state_dict(graphed.state_dict())
    eager.iterate()
    resumed.iterate()
    for name, value in eager.q_network.state_dict().items():
        assert torch.equal(value, resumed.q_network.state_dict()[name]), name


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kind", ["ppo", "pqn"])
def test_a_populations_graph_replay_equals_its_eager_rollout_bit_for_bit(kind):
    """A population's horizon replayed (every PPO member's stream registered with the graph)
    takes the actions its eager steps take, iteration after iteration, and leaves each stream
    where they leave it; its replayed minibatch steps leave the same weights."""

    def population(graph):
        run = {"device": "cuda", "cuda_graph": graph, "amp": "off", "seed": 0}
        return small_population(kind, (3, 7, 11), num_envs=32, num_steps=16, **run)

    eager, graphed = population(False), population(True)
    assert eager.horizon_graph is None and graphed.horizon_graph is not None
    for i in range(3):
        eager.iterate()
        graphed.iterate()
        if kind == "pqn":
            names = ("obs", "actions", "values", "rewards", "terminated", "truncated", "returns")
        else:
            names = ROLLOUT
        for name in names:
            a, b = getattr(eager.storage, name), getattr(graphed.storage, name)
            assert torch.equal(a, b), (i, name)
        for a, b in zip(eager.generators, graphed.generators, strict=True):
            assert torch.equal(a.get_state(), b.get_state()), i
        # the members' stacked weights (a Population: the policy, or the Q-network)
        weights = graphed.network.state_dict()
        for name, value in eager.network.state_dict().items():
            assert torch.equal(value, weights[name]), (i, name)
    assert graphed.horizon_graph.captures == 1
    assert graphed.update_graph.captures == 1  # the minibatch steps replayed: the same weights


class FakeCuda:
    """torch.cuda's stream and graph calls as a CPU test needs them: a capture that fails the
    way a real one does (inside ``torch.cuda.graph``) or a first replay that does."""

    def __init__(self, monkeypatch, fail_at: str):
        import contextlib

        self.fail_at, self.synced = fail_at, 0
        stream = type("Stream", (), {"wait_stream": lambda self, other: None})
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: stream())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.sync())
        fake = self

        class Graph:
            def register_generator_state(self, generator):
                pass

            def replay(self):
                if fake.fail_at == "replay":
                    raise RuntimeError("CUDA error: operation failed due to a previous error\nmore")

        @contextlib.contextmanager
        def capture(graph, stream=None, capture_error_mode=None):
            yield
            if fake.fail_at == "capture":
                raise RuntimeError("operation not permitted when stream is capturing\ndetail")

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", capture)

    def sync(self):
        self.synced += 1


@pytest.mark.parametrize("fail_at", ["capture", "replay"])
def test_a_failed_capture_or_first_replay_falls_back_to_eager_in_one_line(monkeypatch, fail_at):
    """Nothing fatal that eager mode would survive: the device synced, the graph dropped, the
    random stream put back where the capture found it, one line, and every later call eager."""
    cuda = FakeCuda(monkeypatch, fail_at)
    generator = torch.Generator().manual_seed(3)
    calls, lines = [], []

    def steps(slot):
        calls.append(torch.rand(2, generator=generator))  # draws, as a rollout does
        return len(calls)

    graph = graphs.GraphedCall(steps, lambda slot: 0, [generator], "cpu", warn=lines.append)
    slot = torch.zeros(3)
    assert graph(slot) == 1  # the eager warm-up
    before = generator.get_state()
    expected = torch.rand(2, generator=torch.Generator().manual_seed(0).set_state(before))
    assert graph(slot) == 3  # capture (its own call of steps), then the same step eagerly
    assert torch.equal(calls[-1], expected)  # from the state the capture found
    cause = {
        "capture": "RuntimeError: operation not permitted when stream is capturing",
        "replay": "RuntimeError: CUDA error: operation failed due to a previous error",
    }[fail_at]
    assert lines == [
        f"the rollout runs eagerly: capture failed: {cause}; run.cuda_graph = false skips capture"
    ]
    assert cuda.synced == 1 and not graph.graphs and graph.failed == cause
    assert graph(slot) == 4 and graph(torch.zeros(5)) == 5  # eager from then on, no capture
    assert len(lines) == 1 and graph.captures == (fail_at == "replay")  # captures that ended


def test_a_graph_is_held_by_its_slots_address_and_shape():
    """A new index buffer at a freed one's id must not replay the old graph."""
    a = torch.zeros(4)
    assert graphs.slot_name(a) == (id(a), a.data_ptr(), (4,))
    b = torch.zeros(2, 2)
    assert graphs.slot_name(b)[1:] == (b.data_ptr(), (2, 2))
    storage = object()
    assert graphs.slot_name(storage) == (id(storage),)


@pytest.mark.gpu
@gpu
def test_a_capture_that_fails_on_a_gpu_continues_as_the_eager_run(monkeypatch):
    """A capture made to fail on purpose (its CUDA graph refuses to end): the run says so in
    one line per graph and trains on, bit for bit the run with ``run.cuda_graph = false``."""
    real = torch.cuda.graph

    class Refused(real):
        def __exit__(self, *exc):
            super().__exit__(*exc)
            raise RuntimeError("capture refused on purpose")

    monkeypatch.setattr(torch.cuda, "graph", Refused)
    eager, graphed = gpu_trainer(False), gpu_trainer(True)
    lines = []
    graphed.horizon_graph.warn = graphed.update_graph.graph.warn = lines.append
    for i in range(3):
        eager.iterate()
        graphed.iterate()
        assert_same(eager, graphed, i)
    assert [line.split(":")[0] for line in lines] == [
        "the rollout runs eagerly",
        "the update runs eagerly",
    ]
    assert all("capture refused on purpose" in line for line in lines)

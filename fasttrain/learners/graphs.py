"""The rollout horizon as one CUDA graph (``run.cuda_graph``): every step's policy forward,
action sampling, env kernel and storage writes captured once and replayed once per iteration.

At a preset's sizes (512 envs) a rollout step is ~20 small launches, each paying CUDA's launch
cost and the Python around it, so the GPU mostly waits for the host. Replaying the T steps as one
graph removes that fixed cost and changes nothing the run computes: the same kernels read and
write the same buffers (the rollout storage, bound once; the env's buffers; the policy's
parameters, updated in place), and the sampling stream is registered with the graph, so a replay
draws exactly the numbers the eager steps would have (torch's graph-safe Philox offsets) and
leaves the generator where they would have.

The steps must be graph-safe: static shapes, buffers bound once, no host synchronisation and no
Python branching on device values (checked on the CPU path in the tests). What the captured
kernels baked in is the graph's key (``GraphedCall.key``): the storage, the env's params (a
curriculum changing them), the addresses of the policy's tensors (a compiled step adopted, a
state loaded by replacement); when it changes the horizon is captured again.

The first rollout runs eagerly on the capture stream: it is the warm-up torch asks for (lazy
cuBLAS and kernel loading happen outside the capture), and does the iteration's real work.
"""

from __future__ import annotations

import time

import torch

from fasttrain.errors import one_line
from fasttrain.learners.optim import PopulationAdam

# why a run on cuda launches its rollout eagerly, by cause
EAGER_OVERLAP = "ppo.overlap acts in a second thread"
EAGER_TORCH = (
    "this torch cannot register a generator with a CUDA graph (no "
    "CUDAGraph.register_generator_state)"
)


def graph_problem(config, device: torch.device) -> str | None:
    """None where a PPO run's rollout can be captured, else why not (one line), or "" where
    nothing needs saying (a CPU run, or ``run.cuda_graph = false``)."""
    if device.type != "cuda" or not config.run.cuda_graph:
        return ""
    if getattr(config.learner, "overlap", False):
        return EAGER_OVERLAP
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return EAGER_TORCH
    return None


def slot_name(slot) -> tuple:
    """What a captured graph is held under: the slot's identity, and where it is a tensor its
    address and shape (an object id alone can be reused by a new slot once the old is freed)."""
    if torch.is_tensor(slot):
        return (id(slot), slot.data_ptr(), tuple(slot.shape))
    return (id(slot),)


class GraphedCall:
    """``fn(slot)`` run as a CUDA graph: eagerly the first time (the warm-up, on the capture
    stream), captured at the next call and replayed from then on, one graph per ``slot`` (a
    rollout storage, a minibatch's index buffer: what the graph reads and writes); captured
    again whenever ``key(slot)`` changes. ``generators``: the random streams ``fn`` draws from,
    registered with every capture; ``after``: what to call after each run (the env's stream set
    back to torch's current one: its steps ran on the capture stream, or not in Python at all).
    Returns what ``fn`` returned: after a replay the tensors it returned at the capture, which
    the next replay overwrites.

    Where a capture or a graph's first replay fails, nothing is fatal that eager mode would
    survive: the device is synchronised, the graphs dropped, the generators put back where they
    were, one line said through ``warn`` (``what`` names the steps) and ``fn`` runs eagerly from
    the same state, that call and every later one."""

    def __init__(self, fn, key, generators, device: torch.device, after=(), warn=print, what=""):
        self.fn, self.key, self.generators = fn, key, list(generators)
        self.after = list(after)  # called after every run: the warm-up, a capture, a replay
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.graphs: dict[tuple, tuple] = {}  # slot_name(slot) -> (key, graph, output)
        self.warm = False
        self.captures = 0  # how many times a graph was captured (read by tests and bench)
        self.warn, self.what = warn, what or "the rollout"
        self.failed: str | None = None  # why capture failed: eager from then on

    def __call__(self, slot):
        current = torch.cuda.current_stream(self.device)
        if self.failed is not None:
            out = self.fn(slot)
        elif not self.warm:
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                out = self.fn(slot)
            current.wait_stream(self.stream)
            self.warm = True
        else:
            out = self._replay(slot)
        for done in self.after:  # e.g. the env's array work back on the current stream
            done()
        return out

    def _replay(self, slot):
        """The graph of ``slot`` replayed (captured first where it has none or its key
        changed); ``fn(slot)`` run eagerly where the capture or the first replay fails."""
        name, key = slot_name(slot), self.key(slot)
        held = self.graphs.get(name)
        if held is not None and held[0] == key:  # replayed before: a failure is not capture's
            held[1].replay()
            return held[2]
        states = [g.get_state() for g in self.generators]  # what a failure puts back
        try:
            self.graphs.pop(name, None)  # free a stale graph's memory before capturing
            graph, out = self.capture(slot)
            graph.replay()
        except Exception as exc:  # noqa: BLE001 - eager mode survives what capture cannot
            self._fall_back(exc, states)
            return self.fn(slot)
        self.graphs[name] = (key, graph, out)
        return out

    def _fall_back(self, exc: Exception, states: list) -> None:
        torch.cuda.synchronize(self.device)
        self.graphs.clear()
        for generator, state in zip(self.generators, states, strict=True):
            generator.set_state(state)
        self.failed = f"{type(exc).__name__}: {one_line(exc)[:200]}"
        self.warn(
            f"{self.what} runs eagerly: capture failed: {self.failed}; "
            "run.cuda_graph = false skips capture"
        )

    def capture(self, slot) -> tuple:
        """``fn(slot)`` captured (nothing runs; the generators stay where they are): the graph
        and what ``fn`` returned."""
        graph = torch.cuda.CUDAGraph()
        for generator in self.generators:
            graph.register_generator_state(generator)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            out = self.fn(slot)
        self.captures += 1
        return graph, out


def rollout_graph(
    config, device, steps, key, generators, env, warn, compile_mode: str = "off"
) -> GraphedCall | None:
    """A learner's rollout steps ``steps(slot)`` as a ``GraphedCall`` where they can be
    captured (``graph_problem``; a compiled network cannot be), ``generators`` (what the steps
    draw from) registered with it and ``env`` following torch's stream after each run; None
    elsewhere, with one line (through ``warn``) where a cuda run cannot capture."""
    problem = graph_problem(config, device)
    if problem is None and compile_mode != "off":
        problem = f"run.compile = {compile_mode!r} compiles the rollout's network"
    if problem:
        warn(f"the rollout runs eagerly, not as a CUDA graph: {problem}")
    if problem is not None:
        return None
    after = [env.follow_torch_stream]
    return GraphedCall(steps, key, generators, device, after, warn=warn, what="the rollout")


def run_rollout(graph: GraphedCall | None, steps, slot, timers) -> None:
    """``steps(slot)`` launched one by one where ``graph`` is None, else through the graph:
    its first, eager run (the warm-up on the capture stream) times its own steps; a replay runs
    no Python, so it is timed here as environment time."""
    if graph is None or not graph.warm:
        (steps if graph is None else graph)(slot)
        return
    t0 = time.perf_counter()
    graph(slot)
    timers.env += time.perf_counter() - t0


def tensor_addresses(*modules) -> tuple:
    """The data pointers of ``modules``' parameters and buffers: a captured graph reads them."""
    return tuple(
        t.data_ptr() for module in modules for t in (*module.parameters(), *module.buffers())
    )


def update_graph_problem(config, ctx, optimizer) -> str | None:
    """None where a run whose rollout is captured (PPO, PQN) can also capture its minibatch
    steps, else why not (one line). A population's Adam (``PopulationAdam``) reads nothing on
    the host."""
    if ctx.scaler is not None:
        return "run.amp = 'fp16' scales the loss with a scaler that reads its flag on the host"
    if ctx.ranks.enabled:
        return "a data-parallel run all-reduces its gradients between ranks"
    if isinstance(optimizer, PopulationAdam):
        return None
    if not isinstance(optimizer, torch.optim.Adam) or not optimizer.defaults.get("fused"):
        name = f"{config.run.algo}.optimizer"
        return f"{name} = {config.learner.optimizer!r} is not the fused Adam"
    return None


def update_key(module, optimizer, batch: torch.Tensor) -> tuple:
    """What a captured minibatch step baked in: the network's and the optimizer's tensors and
    the flat batch it reads."""
    state = [t for moments in optimizer.state.values() for t in moments.values()]
    return (
        tensor_addresses(module),
        tuple(t.data_ptr() for t in state if torch.is_tensor(t)),
        batch.data_ptr(),
    )


class GraphedUpdate:
    """A learner's minibatch step ``step(mb) -> stats`` replayed as a CUDA graph: ``mb`` (its
    indices, drawn on the device) copied into the one index buffer the graph reads, the step
    counted in ``ctx.updates`` (a replay runs no Python; ``ctx`` None: not counted)."""

    def __init__(self, step, key, device: torch.device, ctx=None, warn=print):
        self.graph = GraphedCall(step, key, [], device, warn=warn, what="the update")
        self.ctx = ctx
        self.slot: torch.Tensor | None = None

    @property
    def captures(self) -> int:
        return self.graph.captures

    def __call__(self, mb: torch.Tensor) -> torch.Tensor:
        if self.slot is None or self.slot.shape != mb.shape:
            self.slot = torch.empty_like(mb)
        self.slot.copy_(mb)
        updates = None if self.ctx is None else self.ctx.updates
        stats = self.graph(self.slot)
        if self.ctx is not None:  # the count the step's Python made, or none (a replay)
            self.ctx.updates = updates + 1
        return stats


def setup_update_graph(learner, step, key, warn) -> GraphedUpdate | None:
    """The minibatch steps of ``learner`` (its ``config``, ``ctx``, ``optimizer``, ``device``,
    and ``horizon_graph`` already set) as a ``GraphedUpdate`` where its rollout is captured and
    its update can be (``update_graph_problem``), else None, one line saying why where the
    rollout is captured. Sets ``learner.rates_on_device``: on cuda the fused Adam reads its rate
    from a device tensor whether its step is captured or not, so a run computes the same
    numbers with ``run.cuda_graph`` on and off."""
    problem = update_graph_problem(learner.config, learner.ctx, learner.optimizer)
    fused = isinstance(learner.optimizer, torch.optim.Adam)
    learner.rates_on_device = learner.device.type == "cuda" and problem is None and fused
    if learner.rates_on_device:
        graph_safe_optimizer(learner.optimizer, learner.device)
    if learner.horizon_graph is None:
        return None
    if problem:
        warn(f"the update runs eagerly, not as CUDA graphs: {problem}")
        return None
    return GraphedUpdate(step, key, learner.device, learner.ctx, warn=warn)


def graph_safe_optimizer(optimizer, device: torch.device) -> None:
    """Fused Adam made capturable: its learning rate a 0-d tensor on ``device`` that a schedule
    fills in place (a float would be baked into the captured step), its flag set (the same
    fused kernel runs either way; torch refuses to capture a step not marked capturable)."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        if not (torch.is_tensor(group["lr"]) and group["lr"].device == device):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)

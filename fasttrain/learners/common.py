"""Training plumbing every learner shares: the run context (device, threads, seeds, environments,
precision), one autocast, one optimizer step, phase timers and the common checkpoint fields."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field

import torch

from fasttrain import distributed
from fasttrain.device import Device, resolve_amp, resolve_compile, resolve_device
from fasttrain.errors import ConfigError
from fasttrain.kernels.env import host_memory_available
from fasttrain.vecenv import VecEnv, make

# Below this many multiply-adds per rollout step (rows x weights) one torch and one Numba thread
# train fastest: the operations are too small to split (measurements: docs/performance.md#threads)
SMALL_STEP_WORK = 500_000


def setup_threads(run, processes: int = 1, step_work: int | None = None) -> None:
    """Set torch and Numba thread counts and GPU math modes. ``0`` in the config means one per
    core, shared out between the ``processes`` ranks on this machine, or one thread where
    ``step_work`` (multiply-adds of a rollout step's forward pass) is below
    ``SMALL_STEP_WORK``."""
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, cores // processes)
    if step_work is not None and step_work < SMALL_STEP_WORK:
        cores = 1
    torch.set_num_threads(run.torch_threads or cores)
    numba.set_num_threads(min(run.numba_threads or cores, numba.config.NUMBA_NUM_THREADS))
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


@contextlib.contextmanager
def one_torch_thread():
    """Initialise a network on one torch thread: orthogonal initialisation (a QR decomposition)
    rounds differently on different thread counts, and a run's count is set only once its
    network is known (``TrainerBase.fit_threads``), so the same seed starts from the same
    weights whatever the threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def warn_once(warn):
    """``warn`` that prints only its first message (one compile warning per run)."""
    said = []

    def once(message: str) -> None:
        if not said:
            said.append(message)
            warn(message)

    return once


OPTIMIZERS = ("adam", "muon")


def check_optimizer(name: str, where: str) -> None:
    """One line for an optimizer this torch lacks (Muon came with torch 2.9)."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown {where}.optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    if name == "muon" and not hasattr(torch.optim, "Muon"):
        raise ConfigError(
            f"{where}.optimizer = 'muon' needs torch >= 2.9 (this is {torch.__version__}); "
            "use 'adam' or upgrade torch"
        )


class Optimizers:
    """Several optimizers stepped as one, each over its own parameters (Muon's matrices and
    Adam's rest); ``param_groups``, ``state`` and the state dict cover them all.

    On the CPU their learning rates are 0-d tensors that a schedule fills in place:
    torch.compile reads a float rate of optimizers stepped from a wrapper like this one as a
    constant, so an annealed rate compiled their step again every iteration (measured: one more
    graph per iteration, to dynamo's limit), where a tensor is an input."""

    def __init__(self, optimizers: list):
        self.optimizers = optimizers
        rates_as_tensors(self)

    @property
    def param_groups(self) -> list[dict]:
        return [group for o in self.optimizers for group in o.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for o in self.optimizers for p, s in o.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        states = state.get("optimizers") if isinstance(state, dict) else None
        if not isinstance(states, list) or len(states) != len(self.optimizers):
            raise ValueError("the checkpoint's optimizer is not this run's")
        for o, s in zip(self.optimizers, states, strict=True):
            o.load_state_dict(s)
        rates_as_tensors(self)  # a checkpoint may hold them as floats


def adam(params, lr: float, eps: float) -> torch.optim.Adam:
    """Adam, fused into one kernel per step where this torch and device support it (CUDA, and
    the CPU from torch 2.4), else the default implementation."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


def make_optimizer(name: str, model: torch.nn.Module, lr: float, eps: float = 1e-5):
    """``adam``: Adam over every parameter. ``muon``: ``torch.optim.Muon`` over the torso's
    weight matrices (learning rate scaled to match Adam's update size, so one learning rate
    serves both) and Adam over biases, convolutions and the output heads. Each group keeps
    the same rate (``set_learning_rate`` schedules them together)."""
    matrices = [p for n, p in model.named_parameters() if n.startswith("torso.") and p.ndim == 2]
    if name == "adam" or not matrices:
        optimizer = adam(model.parameters(), lr, eps)
    else:
        chosen = {id(p) for p in matrices}
        rest = [p for p in model.parameters() if id(p) not in chosen]
        muon = torch.optim.Muon(matrices, lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
        optimizer = Optimizers([muon, adam(rest, lr, eps)])
    return optimizer


def rates_as_tensors(optimizer) -> None:
    """The learning rates of fused Adam (and of ``Optimizers``) as 0-d tensors, which
    ``set_learning_rate`` fills in place: a compiled step reads a float rate as a constant and
    compiles again when a schedule changes it (once, then as a symbol). Unfused Adam keeps its
    float (older torch steps it with Python numbers), and so do parameters off the CPU (a CPU
    rate beside CUDA parameters is not measured: no GPU was at hand)."""
    for part in getattr(optimizer, "optimizers", [optimizer]):
        if isinstance(optimizer, Optimizers) or part.defaults.get("fused"):
            for group in part.param_groups:
                on_cpu = all(p.device.type == "cpu" for p in group["params"])
                if on_cpu and not torch.is_tensor(group["lr"]):
                    group["lr"] = torch.tensor(float(group["lr"]))


def set_learning_rate(optimizer, lr: float) -> None:
    """Every parameter group's learning rate to ``lr`` (a schedule's step)."""
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):  # Optimizers' rates: filled in place
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


class _NoProfilerNotes(logging.Filter):
    """Drops torch.compile's note that the optimizer's profiler markers are left out of the
    compiled code: harmless, and it reads like a problem in a run's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Profiler record function", "Profiler function"))


_NO_PROFILER_NOTES = _NoProfilerNotes()


# Compiled functions guard on the trainer's own objects (its optimizer, its networks), so every
# trainer built in one process (bench's repeats, a sweep's trials) compiles its step anew; past
# dynamo's default of 8 per function it would warn and fall back to eager for the rest.
RECOMPILE_LIMIT = 256


def _allow_a_compile_per_trainer() -> None:
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the name changed in torch 2.6
        if isinstance(getattr(config, name, None), int):
            setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    if isinstance(getattr(config, "accumulated_recompile_limit", None), int):
        limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
        config.accumulated_recompile_limit = limit


def _fast_cpu_tanh() -> None:
    """Inductor's CPU code for tanh as ``2 / (1 + exp(-2x)) - 1`` (its own option) unless the
    user set ``TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH``: Sleef's exact tanh, its default since
    torch 2.7, is ~4x slower, and ~1e-7 matters to an activation no more than rounding
    (docs/performance.md#torchcompile)."""
    if "TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH" in os.environ:
        return
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config.cpp, "use_decompose_tanh"):  # older torch: decomposed already
        inductor_config.cpp.use_decompose_tanh = True


def compile_settings() -> None:
    """fasttrain's dynamo and inductor settings, in the calling thread: torch keeps them per
    thread, so the background compile (``DeferredCompile``) sets them again in its own (without,
    it compiled with dynamo's limit of 8 and Sleef's slow tanh)."""
    _allow_a_compile_per_trainer()
    _fast_cpu_tanh()


def _quiet_compile_notes() -> None:
    for name in ("torch._dynamo.variables.ctx_manager", "torch._dynamo.variables.torch"):
        logger = logging.getLogger(name)
        if _NO_PROFILER_NOTES not in logger.filters:
            logger.addFilter(_NO_PROFILER_NOTES)


class CompiledStep:
    """A network's forward pass or a whole training step under ``torch.compile`` (``mode``
    ``off`` runs it as it is). ``fn`` takes ``owner`` (the trainer, or the network) as its first
    argument: ``step(*args)`` calls ``fn(owner, *args)``, and a compile can run on a copy of the
    owner (``precompile``) while the owner trains eagerly.

    Compilation happens at the first compiled call; where it fails (no C++ compiler for the CPU,
    an unsupported torch) it warns and runs eagerly from then on. Only the first call is
    guarded: it fails while compiling, before a step changes any weight. ``defer()`` makes the
    calls eager until ``switch()``.
    """

    def __init__(self, fn, owner, mode: str, warn=print, what: str = "the update step"):
        self.eager, self.owner = fn, owner
        self.what = what
        self.mode = mode
        self.warn = warn
        self.first = mode != "off"
        self.deferred = False
        self.fn = fn
        if self.first:
            _quiet_compile_notes()
            compile_settings()
            try:
                self.fn = torch.compile(fn, mode=None if mode == "default" else mode)
            except Exception as exc:  # a torch without a compiler for this platform
                self._fall_back(exc)

    def _fall_back(self, exc: Exception) -> None:
        reason = (str(exc).splitlines() or [""])[0][:200]
        self.warn(
            f"warning: torch.compile({self.mode}) of {self.what} failed, running "
            f"eagerly: {type(exc).__name__}: {reason}"
        )
        self.fn, self.first, self.deferred = self.eager, False, False

    @property
    def compiled(self) -> bool:
        return self.fn is not self.eager

    def defer(self) -> None:
        """Run eagerly until ``switch()``."""
        self.deferred = self.compiled

    def precompile(self, owner, *args) -> None:
        """Compile by calling the compiled function on ``owner`` (a copy of the real one) and
        ``args``; raises what compiling raised."""
        self.fn(owner, *args)

    def switch(self, failure: Exception | None = None) -> None:
        """The compiled function from the next call on (eager, with a warning, where the
        compile failed with ``failure``)."""
        self.deferred = False
        if failure is not None and self.compiled:
            self._fall_back(failure)

    def __call__(self, *args):
        if self.deferred or not self.first:
            fn = self.eager if self.deferred else self.fn
            return fn(self.owner, *args)
        self.first = False
        try:
            return self.fn(self.owner, *args)
        except Exception as exc:  # compilation needs a toolchain; never fatal
            self._fall_back(exc)
            return self.fn(self.owner, *args)


def greedy_q_actor(q_network, model_state: dict):
    """``obs -> actions``, the argmax of ``q_network`` loaded with ``model_state`` (the acting of
    every value learner in play and eval)."""
    q_network.load_state_dict(model_state)
    q_network.eval()

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return q_network(obs).argmax(dim=1)

    return act


def call_module(module, *args):
    """``module(*args)``, as a function of the module (what a ``CompiledStep`` compiles)."""
    return module(*args)


# A run that compiles trains eagerly for its first twentieth while its steps compile in a
# background thread on copies of them, then switches; a fixed iteration, so results never depend
# on how long compiling takes (a cold compile of Snake's step took ~20 s on 2 cores).
DEFER_SHARE = 20


# Background compiles still running in this process (a trainer dropped before its switch
# leaves one): a new trainer waits for them before it seeds torch and builds its networks, so
# nothing a compile does to torch's global state (its random stream, fx's patches) reaches it.
_COMPILES: list[threading.Thread] = []


def wait_for_background_compiles() -> None:
    """Join every background compile of this process still running."""
    while _COMPILES:
        _COMPILES.pop().join()


def _fx_patches_for_their_own_thread() -> None:
    """Make torch.fx's tracing patches act only in the thread that traces.

    Inductor traces small functions with ``torch.fx`` while it compiles, and fx patches
    ``torch.nn.Module.__call__`` (and ``__getattr__``) on the class for the length of each
    trace: an eager forward pass in another thread at that moment went through the tracer and
    failed ("module is not installed as a submodule"). With a compile in a background thread
    while the run trains eagerly, every patch installed now calls the tracer only from the
    thread that made it and the original function from every other thread. A torch without
    this private class keeps its own behaviour (and such a run may then fail where it did)."""
    try:
        from torch.fx._symbolic_trace import _Patcher
    except ImportError:
        return
    if getattr(_Patcher, "_fasttrain_thread_aware", False):
        return
    patch, patch_method = _Patcher.patch, _Patcher.patch_method

    def own_thread(new_fn, orig_fn):
        owner = threading.get_ident()

        def patched(*args, **kwargs):
            if threading.get_ident() == owner or orig_fn is None:
                return new_fn(*args, **kwargs)
            return orig_fn(*args, **kwargs)

        patched.__dict__.update(new_fn.__dict__)  # fx's "already patched" mark
        return patched

    def thread_patch(self, frame_dict, name, new_fn, deduplicate=True):
        new_fn.__fx_already_patched = deduplicate
        return patch(self, frame_dict, name, own_thread(new_fn, frame_dict.get(name)), deduplicate)

    def thread_patch_method(self, cls, name, new_fn, deduplicate=True):
        new_fn.__fx_already_patched = deduplicate
        wrapped = own_thread(new_fn, getattr(cls, name))
        return patch_method(self, cls, name, wrapped, deduplicate)

    _Patcher.patch, _Patcher.patch_method = thread_patch, thread_patch_method
    _Patcher._fasttrain_thread_aware = True


@torch.no_grad()
def adopt_compiled(module, optimizer, copy_module, copy_optimizer):
    """The optimizer a background compile ran on (``copy_optimizer``, over ``copy_module``'s
    parameters), made the real one: it and ``copy_module``'s parameters take the values and
    state of ``optimizer`` and ``module``'s, then ``module`` holds those parameter objects.
    Returns the optimizer to train with from now on.

    torch.compile guards the optimizer step on the identity of the optimizer and of its state
    tensors, so without this the first compiled step on the real objects compiles it again."""
    copies = dict(copy_module.named_parameters())
    real = dict(module.named_parameters())
    if copies.keys() != real.keys():
        return optimizer
    for name, p in real.items():
        q = copies[name]
        q.copy_(p)
        theirs, ours = optimizer.state.get(p, {}), copy_optimizer.state.get(q)
        if not theirs and ours:  # no step taken yet: zeroed state is what a first step makes
            for value in ours.values():
                if torch.is_tensor(value):
                    value.zero_()
            continue
        if ours is None or ours.keys() != theirs.keys():
            ours = {}
            for part in getattr(copy_optimizer, "optimizers", [copy_optimizer]):
                if any(q is r for group in part.param_groups for r in group["params"]):
                    part.state[q] = ours
        for key, value in theirs.items():
            if torch.is_tensor(value) and torch.is_tensor(ours.get(key)):
                ours[key].copy_(value)
            else:
                ours[key] = value.clone() if torch.is_tensor(value) else value
    for mine, theirs in zip(copy_optimizer.param_groups, optimizer.param_groups, strict=True):
        for key, value in theirs.items():
            if key == "params":
                continue
            if torch.is_tensor(mine.get(key)):  # a rate tensor: the same object stays
                mine[key].fill_(float(value))
            else:
                mine[key] = value
    for name, q in copies.items():
        owner, _, attr = name.rpartition(".")
        module.get_submodule(owner)._parameters[attr] = q
    return copy_optimizer


class DeferredCompile:
    """The background compile of a trainer's ``CompiledStep``s: ``start(work)`` runs ``work``
    (calls of ``precompile`` on copies) in a thread; ``at(iteration)`` switches every step to its
    compiled function at iteration ``switch_at``, waiting there for the thread if it is not
    done, then calls ``adopt()`` (where the compile succeeded)."""

    def __init__(self, steps: list, switch_at: int, say=print, adopt=None):
        self.steps, self.switch_at, self.say, self.adopt = steps, switch_at, say, adopt
        self.thread, self.failure = None, None
        self.started = self.compiled_s = None
        self.waited_s = 0.0  # seconds the run waited for the compile at the switch

    def start(self, work) -> None:
        for step in self.steps:
            step.defer()

        def run():
            try:
                compile_settings()  # per thread in torch
                work()
            except Exception as exc:  # noqa: BLE001 - reported at the switch, run goes on eager
                self.failure = exc
            self.compiled_s = time.perf_counter() - self.started

        _fx_patches_for_their_own_thread()
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=run, name="fasttrain-compile", daemon=True)
        _COMPILES.append(self.thread)
        self.thread.start()

    def at(self, iteration: int) -> None:
        if self.thread is None or iteration < self.switch_at:
            return
        start = time.perf_counter()
        self.thread.join()
        self.waited_s = time.perf_counter() - start
        self.thread = None
        for step in self.steps:
            step.switch(self.failure)
        if self.failure is None:
            if self.adopt is not None:
                self.adopt()
            self.say(
                f"torch.compile: compiled steps from iteration {iteration:,} on (compiled in "
                f"{self.compiled_s:.1f} s in the background, {self.waited_s:.1f} s waited)"
            )

    def finish(self) -> None:
        """Switch now, whatever the iteration (``fasttrain bench`` times compiled steps)."""
        self.at(max(self.switch_at, 0))


@dataclass
class Timers:
    """Seconds spent per phase since the last ``reset``."""

    env: float = 0.0
    forward: float = 0.0
    learn: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def split(self) -> dict:
        """Fraction of the wall time per phase, ``other`` being the rest."""
        total = max(time.perf_counter() - self.start, 1e-9)
        parts = {"env": self.env, "forward": self.forward, "learn": self.learn}
        parts["other"] = max(total - sum(parts.values()), 0.0)
        return {k: v / total for k, v in parts.items()}

    def reset(self):
        self.env = self.forward = self.learn = 0.0
        self.start = time.perf_counter()


@dataclass
class RunContext:
    """What a learner runs on: the device, its sampling generator, the envs and the precision."""

    device: Device
    generator: torch.Generator  # the learner's sampling stream (actions, minibatches, replay)
    env: VecEnv
    amp_dtype: torch.dtype | None  # autocast dtype of the update, None for float32
    scaler: torch.amp.GradScaler | None  # fp16 only
    ranks: distributed.Ranks = distributed.SINGLE  # data-parallel ranks (torchrun)
    masked_steps: bool = False  # undo non-finite steps on the device (always on a GPU)
    comm_s: float = 0.0  # seconds spent in the gradient all-reduce
    updates: int = 0  # optimizer steps asked for
    skipped: torch.Tensor = None  # () int64 on the device: non-finite steps not taken
    _backups: dict = field(default_factory=dict, repr=False)  # id(tensor) -> copy before a step

    def __post_init__(self):
        if self.skipped is None:
            self.skipped = torch.zeros((), dtype=torch.int64, device=self.device.torch)

    def autocast(self):
        """The one autocast context of every learner's update (a no-op without ``run.amp``)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, self.amp_dtype)

    def optimizer_step(self, optimizer, loss, parameters, max_grad_norm: float) -> None:
        """Zero the gradients, backpropagate ``loss``, clip to ``max_grad_norm`` and step;
        skip the step (and count it in ``skipped``) when the loss or a gradient is not finite.

        ``loss`` may also be an iterable of losses (gradient accumulation): each is
        backpropagated as it comes, so its graph is freed before the next one is built, and
        their gradients add up before the one clip and step.

        On the CPU the check reads one flag per step, which costs nothing; on a GPU that read
        would stall the pipeline, so the step is taken and undone on the device where the flag
        is false, and the count is read once per iteration with the losses.
        """
        parameters = list(parameters)
        optimizer.zero_grad(set_to_none=True)
        parts = getattr(optimizer, "optimizers", [optimizer])
        total = None
        for piece in (loss,) if isinstance(loss, torch.Tensor) else loss:
            if self.scaler is not None:
                self.scaler.scale(piece).backward()
            else:
                piece.backward()
            total = piece.detach() if total is None else total + piece.detach()
        if self.scaler is not None:
            for part in parts:
                self.scaler.unscale_(part)
        if self.ranks.enabled:  # one flat all-reduce: every rank steps with the mean gradient
            t0 = time.perf_counter()
            total = total.reshape(1).float().clone()  # the mean loss: the guard agrees too
            grads = [p.grad for p in parameters if p.grad is not None]
            distributed.all_reduce_mean([*grads, total], self.ranks.world)
            total = total[0]
            self.comm_s += time.perf_counter() - t0
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        finite = torch.isfinite(norm) & torch.isfinite(total)
        self.updates += 1
        if self.scaler is not None:  # GradScaler skips non-finite steps itself
            for part in parts:
                self.scaler.step(part)
            self.scaler.update()
            self.skipped += ~finite
        elif self.device.type == "cpu" and not self.masked_steps:
            if bool(finite):
                optimizer.step()
            else:
                self.skipped += 1
        else:
            self._masked_step(optimizer, parameters, finite)

    @torch.no_grad()
    def _masked_step(self, optimizer, parameters, finite) -> None:
        """``optimizer.step()`` kept only where ``finite`` is true, with no host sync."""
        before = {id(t): t for t in self._step_tensors(optimizer, parameters, finite.device)}
        backups = {key: self._backup(t) for key, t in before.items()}
        torch._foreach_copy_(list(backups.values()), list(before.values()))
        optimizer.step()
        for t in self._step_tensors(optimizer, parameters, finite.device):
            # state the step created (its first) starts from zero where the step is undone
            undo = backups.get(id(t)) if id(t) in before else torch.zeros_like(t)
            t.copy_(torch.where(finite, t, undo))
        self.skipped += ~finite

    @staticmethod
    def _step_tensors(optimizer, parameters, device) -> list[torch.Tensor]:
        """Parameters and their optimizer state on ``device`` (Adam keeps its step counts on
        the CPU: those still advance on an undone step)."""
        tensors = list(parameters)
        for p in parameters:
            tensors += [t for t in optimizer.state.get(p, {}).values() if torch.is_tensor(t)]
        return [t for t in tensors if t.device == device and t.is_floating_point()]

    def _backup(self, tensor: torch.Tensor) -> torch.Tensor:
        backup = self._backups.get(id(tensor))
        if backup is None or backup.shape != tensor.shape:
            backup = self._backups[id(tensor)] = torch.empty_like(tensor)
        return backup

    def take_skipped(self) -> torch.Tensor:
        """Skipped updates since the last call (a device tensor; read it with the losses)."""
        skipped = self.skipped.clone()
        self.skipped.zero_()
        return skipped


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new buffers on ``device`` now (None when unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_memory_available()


@contextlib.contextmanager
def user_sizes(what: str):
    """Turn an allocation the machine refuses (sizes a user chose) into one line."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        text = str(exc).lower()
        if not isinstance(exc, MemoryError) and "alloc" not in text and "memory" not in text:
            raise
        raise ConfigError(f"{what} does not fit in memory: {str(exc).splitlines()[0]}") from None


def check_memory(
    nbytes: int, what: str, device: torch.device, fix: str = "lower num_envs or num_steps"
) -> None:
    """Refuse, in one line and before allocating, buffers that cannot fit in memory."""
    available = available_memory(device)
    if available is not None and nbytes > available:
        raise ConfigError(
            f"{what} needs {nbytes / 2**30:,.1f} GiB but {available / 2**30:,.1f} GiB is free on "
            f"{device.type}; {fix}"
        )


def start_run(config, num_envs: int) -> RunContext:
    """Device, threads, seeds, the environments and precision; every check runs before work."""
    run = config.run
    device = resolve_device(run.device)
    ranks = distributed.setup(run.dist_backend, device.type, run.dist_timeout_s)
    if ranks.enabled and device.type == "cuda":  # one GPU per rank on its machine
        device = Device(torch.device("cuda", ranks.local_rank), device.backend)
    amp = resolve_amp(run.amp, device, config.model.hidden)
    setup_threads(run, ranks.local_world)
    wait_for_background_compiles()  # an earlier trainer's compile must not touch this one
    torch.manual_seed(run.seed)  # the same on every rank: identical initial weights
    # each rank's own environments and sampling stream (rank 0: the single-process run's)
    seed = distributed.rank_seed(run.seed, ranks.rank)
    generator = torch.Generator(device=device.torch).manual_seed(seed % 2**63)
    try:
        env = make(
            config.game.name,
            num_envs=num_envs,
            backend=device.backend,
            seed=seed,
            action_repeat=run.action_repeat,
            **vars(config.params),
        )
    except (ValueError, MemoryError) as exc:  # sizes the machine cannot hold, named in one line
        raise ConfigError(str(exc).splitlines()[0]) from None
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    return RunContext(device, generator, env, amp_dtype, scaler, ranks)


class TrainerBase:
    """What the runner needs of every learner's trainer, and the checkpoint fields they share.

    A subclass sets ``config``, ``args`` (its config section), ``ctx``, ``optimizer``,
    ``num_iterations`` and ``batch_size`` and implements ``iterate() -> dict`` (the losses of one
    iteration, as ``losses/...`` keys), ``state_dict`` and ``load_state_dict`` on top of these.
    """

    iteration = 0
    global_step = 0

    def __init__(self, config, num_envs: int):
        self.config = config
        self.ctx = start_run(config, num_envs)
        self.env = self.ctx.env
        # learner rows: one per agent (num_envs * num_agents); every buffer is per row
        self.rows = self.env.num_rows
        self.device = self.ctx.device.torch
        self.generator = self.ctx.generator
        self.timers = Timers()
        # data-parallel ranks: steps count every rank's, each rank steps its own envs
        self.world = self.ctx.ranks.world

    def share_weights(self, *modules) -> None:
        """Rank 0's weights on every rank (data-parallel runs; nothing otherwise)."""
        if self.ctx.ranks.enabled:
            for module in modules:
                distributed.broadcast_module(module)

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def steps_per_iteration(self) -> int:
        """Agent steps (learner rows) per iteration, over every rank."""
        return self.rows * self.args.num_steps * self.world

    def fit_threads(self, network: torch.nn.Module) -> None:
        """Thread counts for this run's size (``setup_threads``): a small network stepping few
        rows runs on one torch and one Numba thread where the config leaves them at 0."""
        weights = sum(p.numel() for p in network.parameters() if p.ndim > 1)
        setup_threads(self.config.run, self.ctx.ranks.local_world, self.env.num_rows * weights)

    def describe_rows(self) -> str:
        """``256 envs`` or, with several agents per environment, ``64 envs x 8 agents``."""
        envs = f"{self.env.num_envs} envs"
        return envs if self.env.num_agents == 1 else f"{envs} x {self.env.num_agents} agents"

    def describe(self) -> str:
        """The shape of one iteration, for the run's first log line."""
        text = f"{self.describe_rows()} x {self.args.num_steps} steps = batch {self.batch_size}"
        text = text if self.world == 1 else f"{text} per rank x {self.world} ranks"
        return text + self.compile_note()

    def compile_mode_for(self, auto_compile: bool, recurrent: bool = False) -> str:
        """``run.compile`` resolved for this run (``fasttrain.device.resolve_compile``), with
        what the learner says of compiling it (its ``Learner.auto_compile``)."""
        return resolve_compile(
            self.config.run.compile,
            self.ctx.device,
            self.args.total_timesteps,
            auto_compile,
            recurrent,
            self.config.model.hidden,
        )

    @property
    def precision(self) -> str:
        """The update's arithmetic: ``bf16`` or ``fp16`` under ``run.amp``, else ``fp32``."""
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.ctx.amp_dtype, "fp32")

    def compile_note(self) -> str:
        """`` | bf16 update`` (or fp16) under mixed precision (``run.amp``; the rollout's forward
        passes stay float32), then `` | torch.compile (MODE)`` when the learner compiles
        (``run.compile``)."""
        note = "" if self.precision == "fp32" else f" | {self.precision} update"
        mode = getattr(self, "compile_mode", "off")
        return note + ("" if mode == "off" else f" | torch.compile ({mode})")

    def base_state(self) -> dict:
        """Checkpoint fields every learner has: counters, env buffers and random streams."""
        return {
            "learner": self.config.run.algo,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "optimizer": self.optimizer.state_dict(),
            "env": self.env.state_dict(),
            "device": self.device.type,
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def check_state(self, state: dict) -> None:
        """Refuse a checkpoint of another learner or device with one line; changes nothing."""
        learner = state.get("learner", self.config.run.algo)
        if learner != self.config.run.algo:
            raise ConfigError(
                f"checkpoint was written by learner {learner!r} and this run uses "
                f"{self.config.run.algo!r}; resume it with run.algo = {learner!r}"
            )
        saved = state.get("device", "cpu")
        if saved != self.device.type:
            raise ConfigError(
                f"checkpoint was written on device {saved!r} and this run is on "
                f"{self.device.type!r}; resume it with run.device = {saved!r}"
            )

    def load_base_state(self, state: dict) -> None:
        """Restore ``base_state`` fields; call ``check_state`` and learner checks first."""
        try:
            self.env.load_state_dict(state["env"])
        except ValueError as exc:
            raise ConfigError(f"checkpoint does not fit this run: {exc}") from None
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                "checkpoint's optimizer state does not fit this run's optimizer; resume with "
                "the optimizer it was written with"
            ) from None
        if not isinstance(self.optimizer, Optimizers):  # eager steps take a float rate, as
            for group in self.optimizer.param_groups:  # before a compiled step saved a tensor
                group["lr"] = float(group["lr"])
        self.global_step = state["global_step"]
        self.iteration = state["iteration"]
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])

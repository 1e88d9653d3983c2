"""torch.compile for fasttrain's learners, and everything that reaches into torch's internals
to make it work: the compiled step with its eager fallback, the background compile and its
switch at a fixed iteration, dynamo's and inductor's settings, torch.fx's patches made
thread-aware, and the adoption of the objects a background compile ran on. The private names
used are listed in ``fasttrain.kernels.internals``."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from pathlib import Path

import torch

from fasttrain.kernels import internals


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
    for path in (  # the name changed in torch 2.6
        "torch._dynamo.config.recompile_limit",
        "torch._dynamo.config.cache_size_limit",
    ):
        if isinstance(_setting(path), int):
            internals.assign(path, max(internals.resolve(path), RECOMPILE_LIMIT))
    path = "torch._dynamo.config.accumulated_recompile_limit"
    if isinstance(_setting(path), int):
        internals.assign(path, max(internals.resolve(path), 4 * RECOMPILE_LIMIT))


def _setting(path: str):
    """A listed dynamo or inductor setting's value, None where this torch lacks it."""
    try:
        return internals.resolve(path)
    except internals.InternalMissing:
        return None


def _fast_cpu_tanh() -> None:
    """Inductor's CPU code for tanh as ``2 / (1 + exp(-2x)) - 1`` (its own option) unless the
    user set ``TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH``: Sleef's exact tanh, its default since
    torch 2.7, is ~4x slower, and ~1e-7 matters to an activation no more than rounding
    (docs/performance.md#torchcompile)."""
    if "TORCHINDUCTOR_CPP_USE_DECOMPOSE_TANH" in os.environ:
        return
    path = "torch._inductor.config.cpp.use_decompose_tanh"
    if _setting(path) is not None:  # older torch: decomposed already
        internals.assign(path, True)


# Inductor's CPU vector width on a CPU with AVX-512: 256 bits (AVX2 code). Its AVX-512 code
# (its own default there, torch 2.13) corrupted the heap of Snake's default run on a 2-core AMD
# EPYC with AVX-512 BF16, 2026-11-29: "malloc(): unaligned tcache chunk detected" or "double
# free or corruption" within ~10 s, 5 runs of 5 (fp32 too; not with run.compile = "off" nor
# with torch's kernels at AVX2); with 256 bits, 0 of 4 and the same steps/s (the products go
# to oneDNN and MKL either way: only inductor's own loops are 256 bits wide).
CPU_SIMD_BITS = 256


def _safe_cpu_vectors() -> None:
    """Inductor's CPU code at ``CPU_SIMD_BITS`` where torch's kernels are AVX-512's, unless
    the user set ``TORCHINDUCTOR_CPP_SIMDLEN`` or the setting. Elsewhere inductor's own choice
    stands: it follows torch's kernel level (``ATEN_CPU_CAPABILITY``, ``FASTTRAIN_CPU``), which
    is at most AVX2 there."""
    path = "torch._inductor.config.cpp.simdlen"
    capability = torch.backends.cpu.get_cpu_capability()
    if "TORCHINDUCTOR_CPP_SIMDLEN" in os.environ or not capability.startswith("AVX512"):
        return
    try:
        chosen = internals.resolve(path)
    except internals.InternalMissing:  # a torch without the setting
        return
    if chosen is None:  # inductor's own choice: the widest the CPU has
        internals.assign(path, CPU_SIMD_BITS)


# torch.compile's cache folder is set by this variable (inductor reads it at each use, and writes
# its default there at its first)
TORCH_CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def keep_compiles_in_the_project_cache() -> str:
    """torch.compile's caches in fasttrain's cache folder (``fasttrain.kernels.build.
    trusted_torch_cache_dir``, under ``FASTTRAIN_CACHE_DIR`` or ``~/.cache/fasttrain``) unless the
    user set ``TORCHINDUCTOR_CACHE_DIR``: torch's default, ``/tmp/torchinductor_<user>``, is
    emptied by a reboot (every first run of the day compiled cold: ~20 s of a 2-core CPU) and
    is a path another user of the machine can create first, though what is in it is loaded as
    code. Returns the folder in use."""
    from fasttrain.kernels.build import trusted_torch_cache_dir

    chosen = os.environ.get(TORCH_CACHE_VARIABLE)
    if chosen is not None:  # the user's, or torch's default written there at its first use
        try:
            default = internals.resolve("torch._inductor.runtime.cache_dir_utils.default_cache_dir")
        except internals.InternalMissing:
            return chosen
        if os.path.abspath(chosen) != os.path.abspath(default()):
            return chosen
    folder = str(trusted_torch_cache_dir())
    os.environ[TORCH_CACHE_VARIABLE] = folder
    return folder


# run.compile = "auto" where torch's cache holds none of a run's compiled steps (a first run, or
# new settings): compile only where the run's learner arithmetic is estimated to take this long
# at ASSUMED_GFLOPS, so that even a cold compile (~17-20 s of a 2-core CPU) pays. CartPole at
# PufferLib's settings (10M steps, ~2 s of arithmetic) trained in 19 s eagerly and waited as
# long again for a first compile; Snake's and the MinAtar games' runs are hundreds of seconds
# (docs/performance.md#torchcompile)
COLD_COMPILE_MIN_SECONDS = 120
ASSUMED_GFLOPS = 50  # a 2-core AVX2 CPU's fp32 rate at these networks' shapes


def arithmetic_seconds(weights: int, steps: int, update_epochs: int) -> float:
    """A run's learner arithmetic in seconds at ``ASSUMED_GFLOPS``: each step's forward pass
    in the rollout and, per update epoch, its forward and backward (~3 passes), each two
    operations per weight of the network (a multiply and an add per weight and row)."""
    passes = 1 + 3 * update_epochs
    return steps * 2 * weights * passes / (ASSUMED_GFLOPS * 1e9)


def compile_key(config, precision: str) -> str:
    """A name for the steps a run of ``config`` compiles, on this torch and this CPU's kernels:
    its game and parameters, learner settings, network and arithmetic (the learning rate and
    the like too: a key that changes where the graphs did not only makes a cached compile look
    cold, never the reverse)."""
    parts = (
        torch.__version__,
        torch.backends.cpu.get_cpu_capability(),
        config.run.algo,
        repr(config.params),
        repr(config.learner),
        repr(config.model),
        precision,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def _marker(key: str) -> Path:
    return Path(keep_compiles_in_the_project_cache()) / "fasttrain-compiled" / key


_AS_IF_CACHED = threading.local()


def compiled_before(key: str) -> bool:
    """Whether a run on this machine compiled the steps named ``key`` into torch's cache (the
    folder in use: ``keep_compiles_in_the_project_cache``); True inside ``as_if_cached``."""
    return getattr(_AS_IF_CACHED, "on", False) or _marker(key).exists()


@contextlib.contextmanager
def as_if_cached():
    """Within: ``compiled_before`` answers True, so ``run.compile = "auto"`` compiles as on a
    warm cache (``fasttrain bench`` times a config's steady state, which a compile pays for
    whatever the cache holds)."""
    before = getattr(_AS_IF_CACHED, "on", False)
    _AS_IF_CACHED.on = True
    try:
        yield
    finally:
        _AS_IF_CACHED.on = before


def mark_compiled(key: str) -> None:
    """Note that the steps named ``key`` are in torch's cache now (best effort)."""
    path = _marker(key)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.touch()
    except OSError:  # a read-only cache compiles again next time, nothing worse
        pass


def compile_settings() -> None:
    """fasttrain's dynamo and inductor settings, in the calling thread: torch keeps them per
    thread, so the background compile (``DeferredCompile``) sets them again in its own (without,
    it compiled with dynamo's limit of 8 and Sleef's slow tanh)."""
    _allow_a_compile_per_trainer()
    _fast_cpu_tanh()
    _safe_cpu_vectors()


def _quiet_compile_notes() -> None:
    for name in ("torch._dynamo.variables.ctx_manager", "torch._dynamo.variables.torch"):
        internals.listed(name)  # a logger named after its module
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
            keep_compiles_in_the_project_cache()
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


def compiling_in_background() -> bool:
    """A background compile of this process is still running."""
    return any(thread.is_alive() for thread in _COMPILES)


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
        patch = internals.resolve("torch.fx._symbolic_trace._Patcher.patch")
        patch_method = internals.resolve("torch.fx._symbolic_trace._Patcher.patch_method")
    except internals.InternalMissing:
        return
    if getattr(patch, "fasttrain_thread_aware", False):
        return

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

    thread_patch.fasttrain_thread_aware = True
    internals.assign("torch.fx._symbolic_trace._Patcher.patch", thread_patch)
    internals.assign("torch.fx._symbolic_trace._Patcher.patch_method", thread_patch_method)


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
        parameters = internals.resolve("torch.nn.Module._parameters", module.get_submodule(owner))
        parameters[attr] = q
    return copy_optimizer


class DeferredCompile:
    """The background compile of a trainer's ``CompiledStep``s: ``start(work)`` runs ``work``
    (calls of ``precompile`` on copies) in a thread; ``at(iteration)`` switches every step to its
    compiled function at iteration ``switch_at``, waiting there for the thread if it is not
    done, then calls ``adopt()`` (where the compile succeeded)."""

    def __init__(self, steps: list, switch_at: int, say=print, adopt=None, key: str | None = None):
        self.steps, self.switch_at, self.say, self.adopt = steps, switch_at, say, adopt
        self.key = key  # compile_key of the steps: marked compiled where they were
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
            if self.key is not None:
                mark_compiled(self.key)
            if self.adopt is not None:
                self.adopt()
            self.say(
                f"torch.compile: compiled steps from iteration {iteration:,} on (compiled in "
                f"{self.compiled_s:.1f} s in the background, {self.waited_s:.1f} s waited)"
            )

    def finish(self) -> None:
        """Switch now, whatever the iteration (``fasttrain bench`` times compiled steps)."""
        self.at(max(self.switch_at, 0))

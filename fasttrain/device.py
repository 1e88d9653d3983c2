"""The one device rule: ``run.device`` (or ``--device``) to a torch device and a kernel backend.

Learners, ``fasttrain.make(backend="auto")`` and ``fasttrain bench`` call ``resolve_device``;
nothing else decides what ``auto`` means.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

import torch

from fasttrain.config.choices import AMP_MODES, COMPILE_MODES, DEVICES
from fasttrain.environ import CPU, emulated_cpu
from fasttrain.errors import ConfigError
from fasttrain.kernels import cuda_available
from fasttrain.kernels.env import host_memory_available
from fasttrain.kernels.gpu import cuda_problem, quiet_known_gpu_noise, simulator

# /proc/cpuinfo flags of CPUs that compute in bfloat16 natively (x86 AVX512-BF16 or AMX, Arm BF16)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# the classes of CPU whose figures differ (docs/performance.md), fastest matrix units first:
# (class, the /proc/cpuinfo flag that makes it); "baseline" is a CPU with none of them
CPU_CLASSES = (
    ("amx", "amx_bf16"),
    ("avx512-bf16", "avx512_bf16"),
    ("avx512", "avx512f"),
    ("avx2", "avx2"),
    ("arm-bf16", "bf16"),
    ("neon", "asimd"),
)
BF16_CLASSES = ("amx", "avx512-bf16", "arm-bf16")


@dataclass(frozen=True)
class Device:
    """Where a run's environments and learner live."""

    torch: torch.device  # the learner's tensors
    backend: str  # the environments' kernel backend: "cpu" or "cuda"

    @property
    def type(self) -> str:
        return self.torch.type


def resolve_device(name: str) -> Device:
    """``auto`` → cuda when a GPU serves both kernels and torch, else cpu; ``cuda`` without a
    usable GPU fails with one line naming what is missing."""
    if name not in DEVICES:
        raise ConfigError(f"unknown device {name!r}; valid: {', '.join(DEVICES)}")
    if name == "auto":
        # torch first: a CPU build of torch answers at once, where asking numba-cuda imports it
        name = "cuda" if torch.cuda.is_available() and cuda_available() else "cpu"
        if name == "cpu" and torch.cuda.is_available():
            _say_why_not_the_gpu()
    if name == "cuda":
        problem = cuda_problem()
        if problem is None and simulator():
            problem = "the CUDA simulator runs environments only; the learner needs a real GPU"
        elif problem is None and not torch.cuda.is_available():
            problem = "torch was built without CUDA; install a CUDA build of torch"
        if problem:
            raise ConfigError(f"device 'cuda' is not available: {problem}")
        quiet_known_gpu_noise()
    return Device(torch.device(name), name)


_SAID_WHY_NOT_THE_GPU: list[str] = []


def _say_why_not_the_gpu() -> None:
    """One line on stderr, once per process, where ``auto`` trains on the CPU although torch
    sees a GPU: the environments' cuda backend cannot run (``cuda_problem``), and what to
    install. A GPU machine never falls back in silence."""
    problem = cuda_problem() or "the cuda backend is not available"
    line = f"warning: torch sees a GPU, but fasttrain's cuda backend cannot run: {problem}; "
    line += "training on the CPU (--device cuda fails with this reason instead)"
    if line not in _SAID_WHY_NOT_THE_GPU:
        _SAID_WHY_NOT_THE_GPU.append(line)
        print(line, file=sys.stderr)


def device_type(name: str) -> str:
    """The device type ``run.device`` will resolve to, without failing: ``cuda`` for cuda (the
    run itself says what is missing), and for ``auto`` where a GPU serves kernels and torch;
    else ``cpu``. Presets are chosen by it."""
    if name == "cuda":
        return "cuda"
    if name == "auto" and torch.cuda.is_available() and cuda_available():
        return "cuda"
    return "cpu"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86 | Arm
                    return set(value.split())
    except OSError:
        pass
    return set()


def cpu_class() -> str:
    """This CPU's class (``CPU_CLASSES``: ``amx``, ``avx512-bf16``, ``avx512``, ``avx2``,
    ``arm-bf16``, ``neon`` or ``baseline``), or the one ``FASTTRAIN_CPU`` emulates."""
    emulated = emulated_cpu()
    if emulated is not None:
        return emulated
    flags = cpu_flags()
    return next((name for name, flag in CPU_CLASSES if flag in flags), "baseline")


def preset_variant(choice: str, device_type: str) -> tuple[str, str]:
    """``run.preset`` resolved (``fasttrain.config.presets``), and why in a few words:
    ``auto`` is ``cuda`` on a GPU, ``fp32`` on a CPU whose class computes no bf16 natively
    (not in ``BF16_CLASSES``: AVX2, AVX-512 without BF16, NEON) and ``base`` on the others
    (AMX, AVX-512 BF16, Arm BF16); any other choice is taken as given."""
    if choice != "auto":
        return choice, "run.preset"
    if device_type == "cuda":
        return "cuda", "a GPU run"
    cls = cpu_class()
    where = f"CPU class {cls}" + (f" ({CPU})" if emulated_cpu() else "")
    if cls in BF16_CLASSES:
        return "base", f"{where}, native bf16"
    return "fp32", f"{where}, no native bf16"


def emulation_problem() -> str | None:
    """Why ``FASTTRAIN_CPU`` did not take effect in this process, or None: torch loaded before
    fasttrain set its libraries' limits (set the variable before Python starts)."""
    emulated = emulated_cpu()
    if emulated is None:
        return None
    have = torch.backends.cpu.get_cpu_capability()
    if have.lower() not in (emulated, "default"):
        return (
            f"{CPU}={emulated} did not take effect: torch runs {have} kernels (torch was "
            f"imported before fasttrain; set {CPU} before Python starts)"
        )
    return None


def native_bf16(device: Device) -> bool:
    """True where bfloat16 matrix math runs natively: a GPU of compute capability 8.0 or more
    (Ampere on), or a CPU with AVX512-BF16, AMX or Arm BF16. Elsewhere bf16 is emulated, slower
    than float32."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device.torch)[0] >= 8
    if device.type == "cpu":
        return cpu_class() in BF16_CLASSES
    return False


# On a CPU bf16 pays off only for layers this wide or wider (docs/performance.md#bf16-on-the-cpu)
CPU_BF16_MIN_WIDTH = 128


def resolve_amp(amp: str, device: Device, width: int | None = None) -> str:
    """``run.amp`` to what the networks use: ``auto`` is ``bf16`` where ``native_bf16`` (on a
    CPU only for layers of ``width`` >= ``CPU_BF16_MIN_WIDTH``) and ``off`` elsewhere; ``fp16``
    needs a GPU (one line otherwise)."""
    if amp not in AMP_MODES:
        raise ConfigError(f"unknown run.amp {amp!r}; valid: {', '.join(AMP_MODES)}")
    if amp == "auto":
        narrow = device.type == "cpu" and width is not None and width < CPU_BF16_MIN_WIDTH
        return "bf16" if native_bf16(device) and not narrow else "off"
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError("run.amp = 'fp16' needs device cuda; use 'bf16' on the CPU")
    return amp


# run.compile = "auto" compiles runs of this many steps or more with layers this wide or narrower
# (docs/performance.md#torchcompile)
COMPILE_MIN_STEPS = 2_000_000
COMPILE_MAX_WIDTH = 256


def cpp_compiler() -> str | None:
    """The path of the C++ compiler torch.compile's CPU code generator calls (``$CXX``, else
    g++ or clang++), or None where there is none."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++", "c++"]
    return next((path for path in map(shutil.which, names) if path), None)


def dynamo_supported() -> bool:
    """Whether this torch can compile on this Python (torch 2.3 could not on Python 3.12)."""
    try:
        from fasttrain.kernels.internals import resolve

        return bool(resolve("torch._dynamo.is_dynamo_supported")())
    except Exception:  # an old or stripped-down torch
        return False


def resolve_compile(
    mode: str,
    device: Device,
    steps: int,
    learner_pays: bool = True,
    recurrent: bool = False,
    width: int = 128,
) -> str:
    """``run.compile`` to the ``torch.compile`` mode used (``off``: eager). ``auto`` is
    ``default`` for a feed-forward run of a learner that compiling pays for (``learner_pays``:
    ``Learner.auto_compile``) of ``COMPILE_MIN_STEPS`` steps or more with layers at most
    ``COMPILE_MAX_WIDTH`` wide, on a CPU where a C++ compiler is found and this torch compiles
    on this Python; ``off`` elsewhere (short runs, wide networks, learners and recurrent
    policies not measured faster, and GPUs, not measured). The other modes are taken as
    given."""
    if mode not in COMPILE_MODES:
        raise ConfigError(f"unknown run.compile {mode!r}; valid: {', '.join(COMPILE_MODES)}")
    if mode != "auto":
        return mode
    pays = steps >= COMPILE_MIN_STEPS and width <= COMPILE_MAX_WIDTH and learner_pays
    if device.type != "cpu" or not pays or recurrent:
        return "off"
    return "default" if cpp_compiler() and dynamo_supported() else "off"


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new buffers on ``device`` now (None when unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_memory_available()


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

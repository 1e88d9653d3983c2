"""fasttrain.device: the one device rule (``auto``, ``cpu``, ``cuda``), and what ``run.amp``
(by CPU flags, GPU compute capability and network width) and ``run.compile = auto`` become on
it; the C++ compiler torch.compile calls; the CPU's class and its emulation (FASTTRAIN_CPU)."""

import os
import subprocess
import sys

import pytest
import torch

from fasttrain import device
from fasttrain import device as devices  # where a test parametrizes "device"
from fasttrain.device import (
    Device,
    device_type,
    native_bf16,
    resolve_amp,
    resolve_compile,
    resolve_device,
)
from fasttrain.errors import ConfigError
from fasttrain.learners import LEARNERS
from tests.cli import ROOT, finish, start

CPU = Device(torch.device("cpu"), "cpu")
GPU = Device(torch.device("cuda"), "cuda")


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


@pytest.mark.linux
def test_cpu_flags_reads_this_machine():
    flags = device.cpu_flags()
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


@pytest.mark.parametrize(
    "device, steps, learner, recurrent, width, compiler, expected",
    [
        ("cpu", device.COMPILE_MIN_STEPS, "ppo", False, 128, True, "default"),  # a long run
        ("cpu", device.COMPILE_MIN_STEPS, "ppo", False, 256, True, "default"),
        ("cpu", device.COMPILE_MIN_STEPS - 1, "ppo", False, 128, True, "off"),  # too short
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


@pytest.mark.posix  # a shell script as the compiler
def test_cpp_compiler_follows_cxx(monkeypatch, tmp_path):
    fake = tmp_path / "my-c++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert device.cpp_compiler() == str(fake)
    monkeypatch.setenv("CXX", str(tmp_path / "missing"))
    assert device.cpp_compiler() is None


@pytest.fixture
def gpu(monkeypatch):
    """Say whether torch and the kernels see a usable GPU: ``gpu(torch_sees, kernels_see)``."""

    def set_gpu(torch_sees: bool, kernels_see: bool, problem=None):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: torch_sees)
        monkeypatch.setattr(device, "cuda_available", lambda: kernels_see)
        monkeypatch.setattr(device, "cuda_problem", lambda: problem)
        monkeypatch.setattr(device, "simulator", lambda: False)

    return set_gpu


def test_auto_is_cuda_only_where_torch_and_the_kernels_both_see_a_gpu(gpu):
    for torch_sees, kernels_see in ((False, False), (True, False), (False, True)):
        gpu(torch_sees, kernels_see)
        assert resolve_device("auto") == CPU and device_type("auto") == "cpu"
    gpu(True, True)
    assert resolve_device("auto") == GPU and device_type("auto") == "cuda"
    assert resolve_device("auto").type == "cuda" and resolve_device("cpu") == CPU


def test_auto_on_a_gpu_the_backend_cannot_use_says_why_once_then_trains_on_the_cpu(
    gpu, monkeypatch, capsys
):
    """numpy 2.5 under numba-cuda 0.30 (a fresh install before the extra's bound) trained on
    the CPU without a word while torch saw the GPU."""
    monkeypatch.setattr(device, "_SAID_WHY_NOT_THE_GPU", [])
    why = "numba-cuda 0.30.4 calls np.row_stack, which numpy 2.5.0 removed; pip install 'numpy<2.5'"
    gpu(True, False, problem=why)
    assert resolve_device("auto") == CPU and resolve_device("auto") == CPU  # twice, said once
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"warning: torch sees a GPU, but fasttrain's cuda backend cannot run: {why}; "
        "training on the CPU (--device cuda fails with this reason instead)"
    ]
    gpu(False, False, problem="no CUDA GPU is visible")  # no GPU at all: nothing to say
    assert resolve_device("auto") == CPU and capsys.readouterr().err == ""


def test_the_cuda_extra_keeps_a_numpy_numba_cuda_can_load():
    """numba-cuda calls np.row_stack, which numpy 2.5 removed: ``pip install 'fasttrain[cuda]'``
    must not resolve numpy 2.5 (and the test extra, which brings numba-cuda too, neither)."""
    import re

    from fasttrain.config.read import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    for name in ("cuda", "test"):
        bounds = [r for r in extras[name] if re.match(r"numpy\b", r)]
        assert len(bounds) == 1, (name, bounds)
        upper = re.search(r"<\s*(\d+)\.(\d+)", bounds[0])
        assert upper and (int(upper[1]), int(upper[2])) <= (2, 5), (name, bounds[0])


def test_cuda_without_a_usable_gpu_says_what_is_missing_in_one_line(gpu, monkeypatch):
    gpu(False, False, problem="no CUDA GPU is visible")
    with pytest.raises(ConfigError, match=r"^device 'cuda' is not available: no CUDA GPU"):
        resolve_device("cuda")
    assert device_type("cuda") == "cuda"  # presets are picked for what was asked
    gpu(False, True)
    with pytest.raises(ConfigError, match=r"torch was built without CUDA; install a CUDA build"):
        resolve_device("cuda")
    gpu(True, True)
    monkeypatch.setattr(device, "simulator", lambda: True)
    with pytest.raises(ConfigError, match=r"the CUDA simulator runs environments only"):
        resolve_device("cuda")


def test_an_unknown_device_is_refused_naming_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^unknown device 'gpu'; valid: auto, cpu, cuda$"):
        resolve_device("gpu")
    assert device_type("gpu") == "cpu"  # never fails: the run itself refuses it


def test_compile_auto_is_on_only_for_long_narrow_feed_forward_runs_on_a_cpu(monkeypatch):
    monkeypatch.setattr(device, "cpp_compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(device, "dynamo_supported", lambda: True)
    steps = device.COMPILE_MIN_STEPS
    assert resolve_compile("auto", CPU, steps) == "default"
    assert resolve_compile("auto", CPU, steps - 1) == "off"
    assert resolve_compile("auto", CPU, steps, width=device.COMPILE_MAX_WIDTH + 1) == "off"
    assert resolve_compile("auto", CPU, steps, learner_pays=False) == "off"
    assert resolve_compile("auto", CPU, steps, recurrent=True) == "off"
    assert resolve_compile("auto", GPU, steps) == "off"
    monkeypatch.setattr(device, "cpp_compiler", lambda: None)
    assert resolve_compile("auto", CPU, steps) == "off"
    for mode in ("off", "default", "reduce-overhead", "max-autotune"):
        assert resolve_compile(mode, GPU, 1, recurrent=True) == mode  # taken as given
    with pytest.raises(ConfigError, match=r"^unknown run.compile 'fast'; valid: auto, off"):
        resolve_compile("fast", CPU, steps)


def test_amp_modes_outside_the_list_and_fp16_on_a_cpu_are_refused():
    with pytest.raises(ConfigError, match=r"^unknown run.amp 'fp8'; valid: auto, off, bf16, fp16$"):
        device.resolve_amp("fp8", CPU)
    with pytest.raises(ConfigError, match=r"^run.amp = 'fp16' needs device cuda"):
        device.resolve_amp("fp16", CPU)


def test_cpu_flags_are_read_from_x86_and_arm_cpuinfo(tmp_path, monkeypatch):
    import builtins

    real_open = builtins.open
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(
        builtins, "open", lambda p, *a, **k: real_open(info if p == "/proc/cpuinfo" else p)
    )
    for text, flags in (
        ("processor\t: 0\nflags\t\t: fpu sse avx512_bf16\n", {"fpu", "sse", "avx512_bf16"}),
        ("processor\t: 0\nFeatures\t: fp asimd bf16\n", {"fp", "asimd", "bf16"}),
        ("processor\t: 0\n", set()),
    ):
        info.write_text(text)
        assert device.cpu_flags() == flags
        assert device.native_bf16(CPU) is bool(flags & set(device.BF16_CPU_FLAGS))


def test_the_cpp_compiler_is_cxx_when_set(monkeypatch):
    monkeypatch.setenv("CXX", "my-cxx")
    monkeypatch.setattr(device.shutil, "which", lambda name: f"/opt/bin/{name}")
    assert device.cpp_compiler() == "/opt/bin/my-cxx"
    monkeypatch.delenv("CXX")
    assert device.cpp_compiler() == "/opt/bin/g++"
    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    assert device.cpp_compiler() is None


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"fpu", "sse2", "avx2"}, "avx2"),  # most laptops: no AVX-512, no AMX
        ({"avx2", "avx512f"}, "avx512"),  # Skylake-X, Ice Lake server
        ({"avx2", "avx512f", "avx512_bf16"}, "avx512-bf16"),  # Zen 4, Cooper Lake
        ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "amx"),  # Sapphire Rapids
        ({"fp", "asimd", "bf16"}, "arm-bf16"),  # Graviton 3
        ({"fp", "asimd"}, "neon"),  # Graviton 2, Raspberry Pi 4
        (set(), "baseline"),  # no /proc/cpuinfo
    ],
)
def test_the_cpu_class_is_read_from_its_flags_fastest_units_first(monkeypatch, flags, expected):
    monkeypatch.delenv("FASTTRAIN_CPU", raising=False)
    monkeypatch.setattr(devices, "cpu_flags", lambda: set(flags))
    assert device.cpu_class() == expected
    assert native_bf16(CPU) is (expected in ("amx", "avx512-bf16", "arm-bf16"))


def test_an_emulated_avx2_class_sees_no_bf16_whatever_the_flags(monkeypatch):
    monkeypatch.setenv("FASTTRAIN_CPU", "AVX2")
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_bf16"})
    assert device.cpu_class() == "avx2"
    assert resolve_amp("auto", CPU, 512) == "off"


EMULATION_PROBE = """
import os, sys
if sys.argv[1] == "late":  # torch decided its kernels before fasttrain could set the limits
    import torch
    torch.backends.cpu.get_cpu_capability()
    os.environ["FASTTRAIN_CPU"] = "avx2"
import torch
import fasttrain
from fasttrain import device
print(torch.backends.cpu.get_cpu_capability(), device.cpu_class(), device.emulation_problem())
"""


@pytest.mark.linux
def test_fasttrain_cpu_avx2_stops_torchs_kernels_at_avx2_or_says_it_did_not(tmp_path):
    """On a CPU with AVX-512 the emulation takes effect (torch's kernels are AVX2's) when set
    before torch decides; set too late, ``emulation_problem`` says so."""
    if "avx2" not in device.cpu_flags():
        pytest.skip("an x86 CPU with AVX2")
    env = {"FASTTRAIN_CPU": "avx2"}
    early = finish(start("-c", EMULATION_PROBE, "early", env=env))
    assert early.stdout.split() == ["AVX2", "avx2", "None"], early.stderr
    if "avx512f" not in device.cpu_flags():
        return  # an AVX2 machine: torch's kernels are AVX2's whenever it decides
    clean = {k: v for k, v in os.environ.items() if k != "FASTTRAIN_CPU"}
    late = subprocess.run(
        [sys.executable, "-c", EMULATION_PROBE, "late"],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(ROOT)},
    )
    assert late.stdout.startswith("AVX512 avx2 FASTTRAIN_CPU=avx2 did not take effect"), late

"""The device rules of ``fasttrain/device.py``: run.amp = "auto" by CPU flags, GPU compute
capability and network width; run.compile = "auto"; the C++ compiler torch.compile calls."""

import pytest
import torch

from fasttrain import device as devices
from fasttrain.device import Device, native_bf16, resolve_amp
from fasttrain.learners import LEARNERS

CPU = Device(torch.device("cpu"), "cpu")


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


def test_cpp_compiler_follows_cxx(monkeypatch, tmp_path):
    fake = tmp_path / "my-c++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert devices.cpp_compiler() == str(fake)
    monkeypatch.setenv("CXX", str(tmp_path / "missing"))
    assert devices.cpp_compiler() is None

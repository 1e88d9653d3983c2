"""fasttrain.kernels.gpu: the GPU probes answer in one line, without a GPU and without
compiling anything."""

import pytest

from fasttrain.kernels import gpu as device


def test_the_simulator_is_on_exactly_when_numba_is_told_so(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert device.simulator()
    for value in ("0", "", "true"):
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", value)
        assert not device.simulator()
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    assert not device.simulator()


def test_without_numba_cuda_the_problem_names_the_extra_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "numba.cuda", None)  # import numba.cuda raises ImportError
    monkeypatch.delattr("numba.cuda", raising=False)
    assert device.cuda_problem() == (f"numba-cuda is not installed; {device.INSTALL_HINT}")


def test_a_numpy_too_new_for_numba_cuda_is_named_in_one_line(monkeypatch):
    """numpy 2.5 removed np.row_stack, which numba-cuda 0.30 calls at every launch: the first
    CUDA use says which versions work instead of a traceback inside numba-cuda."""
    pytest.importorskip("numba_cuda")
    import numpy as np

    from fasttrain.kernels import gpu as device

    device.numpy_too_new_for_numba_cuda.cache_clear()
    monkeypatch.delattr(np, "row_stack")
    try:
        problem = device.cuda_problem()
    finally:
        device.numpy_too_new_for_numba_cuda.cache_clear()
    assert problem is not None and "np.row_stack" in problem and "numpy<2.5" in problem
    assert "\n" not in problem


def test_known_gpu_noise_is_silenced_by_its_message_and_nothing_else():
    import warnings

    from fasttrain.kernels import gpu

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu.quiet_known_gpu_noise()
        warnings.warn(
            "This instance was constructed with capturable=True or some of all the param_groups "
            "came with capturable=True, but step() is running without CUDA graph capture.",
            UserWarning,
            stacklevel=2,
        )
        warnings.warn(
            "Grid size 4 will likely result in GPU under-utilization due to low occupancy.",
            stacklevel=2,
        )
        warnings.warn("Grid size is a word in another warning", UserWarning, stacklevel=2)
        warnings.warn("capturable=True, said differently", UserWarning, stacklevel=2)
    assert [str(w.message) for w in caught] == [
        "Grid size is a word in another warning",
        "capturable=True, said differently",
    ]


def test_numba_cuda_is_imported_in_one_place():
    """Every module asks ``gpu.numba_cuda()``: numba-cuda's successor is one change away."""
    import re

    from tests.cli import ROOT

    found = []
    for path in sorted((ROOT / "fasttrain").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"from numba import cuda\b|import numba\.cuda\b|from numba\.cuda\b", code):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    assert found == ["fasttrain/kernels/gpu.py:41"], found

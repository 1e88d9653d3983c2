"""Column kernels: one scalar function per column, the same results on every backend."""

import numpy as np
import pytest

from fasttrain.kernels import ColumnKernel
from fasttrain.kernels.build import cache_dir


def add(total, x):
    return total + x


def cumsum_one(i, values, out):
    """Running sum down column ``i`` (through a helper, so the call graph is retargeted)."""
    total = 0.0
    for t in range(values.shape[0]):
        # explicit float64: NumPy 2 keeps 0.0 + float32 in float32, Numba widens it to float64
        total = add(total, np.float64(values[t, i]))
        out[t, i] = total


CUMSUM = ColumnKernel(cumsum_one)


def test_a_throwaway_kernel_gives_identical_results_on_python_and_cpu():
    values = np.random.default_rng(0).standard_normal((50, 13)).astype(np.float32)
    outs = {backend: np.zeros((50, 13), np.float32) for backend in ("python", "cpu")}
    for backend, out in outs.items():
        CUMSUM(backend, values, out)
    assert np.array_equal(outs["python"], outs["cpu"])
    np.testing.assert_allclose(outs["cpu"], np.cumsum(values, axis=0, dtype=np.float64), 1e-6)


def test_the_column_rule_picks_how_many_columns_run():
    values = np.ones((4, 6), np.float32)
    out = np.zeros((4, 6), np.float32)
    assert CUMSUM.bind("cpu", (values, out)).num_columns == 6  # default: args[0].shape[-1]
    first_two = ColumnKernel(cumsum_one, columns=lambda args: 2)
    first_two("cpu", values, out)
    assert (out[:, :2] == np.arange(1, 5)[:, None]).all() and (out[:, 2:] == 0).all()


def test_launchers_are_built_once_per_backend_and_compile_once():
    values, out = np.ones((3, 5), np.float32), np.zeros((3, 5), np.float32)
    CUMSUM("cpu", values, out)
    launcher = CUMSUM.launcher("cpu")
    assert CUMSUM.launcher("cpu") is launcher and CUMSUM.launcher("python") is not launcher
    for _ in range(3):
        CUMSUM.bind("cpu", (values, out))()
    assert len(launcher.signatures) == 1
    # the launcher lives in a real file under the cache directory, as Numba's cache=True needs
    source = launcher.py_func.__code__.co_filename
    assert source.startswith(str(cache_dir())) and "cumsum_one" in source


def test_bad_use_names_what_was_expected():
    values, out = np.ones((3, 5), np.float32), np.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match="unknown backend 'gpu'; valid: python, cpu, cuda"):
        CUMSUM.bind("gpu", (values, out))
    with pytest.raises(TypeError, match=r"takes 2 arguments \(values, out\), got 1"):
        CUMSUM("cpu", values)

    def no_index(values, out):
        pass

    with pytest.raises(ValueError, match="column index `i` first"):
        ColumnKernel(no_index)

"""The environment variables the command reads, each checked in one line as it starts."""

import pytest

from fasttrain import environ
from fasttrain.errors import ConfigError
from fasttrain.kernels import backends

VARIABLE = "FASTTRAIN_TEST_ENVIRON_NUMBER"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("abc", "not a whole number"),
        ("", "not a whole number"),  # set but empty is not unset
        ("2.0", "not a whole number"),
        ("0", "below 1"),
        ("-3", "below 1"),
        ("5", "above 4"),
        (str(2**70), "above 4"),
    ],
)
def test_a_bad_whole_number_is_one_line_naming_the_variable_its_value_and_what_is_valid(
    monkeypatch, text, problem
):
    monkeypatch.setenv(VARIABLE, text)
    with pytest.raises(ConfigError) as info:
        environ.whole_number(VARIABLE, 1, 4, "1 to 4 things")
    assert str(info.value) == f"{VARIABLE}={text}: {problem}; 1 to 4 things"


def test_a_whole_number_in_range_is_read_and_an_unset_one_is_none(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    assert environ.whole_number(VARIABLE, 1, 4, "") is None
    for text, value in [("1", 1), (" 4 ", 4), ("3", 3)]:
        monkeypatch.setenv(VARIABLE, text)
        assert environ.whole_number(VARIABLE, 1, 4, "") == value
    monkeypatch.setenv(VARIABLE, str(2**70))
    assert environ.whole_number(VARIABLE, 1, None, "") == 2**70  # no upper bound asked


def test_numba_threads_below_one_or_not_a_number_is_refused_at_the_start(monkeypatch):
    monkeypatch.delenv(environ.CHECKED_KERNELS, raising=False)
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    environ.check_at_start()
    for text in ("0", "many", ""):
        monkeypatch.setenv("NUMBA_NUM_THREADS", text)
        with pytest.raises(
            ConfigError, match=f"^NUMBA_NUM_THREADS={text}: .*; the threads of Numba's"
        ):
            environ.check_at_start()


def test_the_start_checks_the_checked_kernels_variable_by_the_name_the_kernels_read(monkeypatch):
    assert environ.CHECKED_KERNELS == backends.CHECKED_KERNELS
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    for good in ("0", "1"):
        monkeypatch.setenv(environ.CHECKED_KERNELS, good)
        environ.check_at_start()
    monkeypatch.setenv(environ.CHECKED_KERNELS, "yes")
    with pytest.raises(ConfigError) as info:
        environ.check_at_start()
    assert str(info.value) == (
        "FASTTRAIN_CHECKED_KERNELS=yes: neither 0 nor 1; 1 compiles bounds-checked cpu kernels "
        "(tests, fuzzing), 0 or unset the usual ones"
    )


def test_the_cuda_layout_variable_is_checked_at_the_start_by_the_name_the_kernels_read(
    monkeypatch,
):
    from fasttrain.kernels import gpu
    from fasttrain.kernels.env import LAYOUTS

    assert environ.CUDA_LAYOUT == gpu.CUDA_LAYOUT and gpu.LAYOUTS == LAYOUTS
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.delenv(environ.CHECKED_KERNELS, raising=False)
    monkeypatch.delenv(environ.CUDA_LAYOUT, raising=False)
    assert gpu.cuda_layout() is None
    for layout in LAYOUTS:
        monkeypatch.setenv(environ.CUDA_LAYOUT, layout)
        assert gpu.cuda_layout() == layout
        environ.check_at_start()
    monkeypatch.setenv(environ.CUDA_LAYOUT, "row-major")
    with pytest.raises(ConfigError) as info:
        environ.check_at_start()
    assert str(info.value) == (
        "FASTTRAIN_CUDA_LAYOUT=row-major: not a layout; env-major, obs-minor, env-minor, or unset "
        "for the cuda backend's default (obs-minor)"
    )


def test_the_cuda_backend_takes_its_layout_from_the_variable():
    """On the simulator (chosen as numba.cuda first imports: a subprocess), one backend per
    value of the variable."""
    import os
    import subprocess
    import sys

    script = (
        "import os\n"
        "from fasttrain.kernels import cuda\n"
        "for layout in ('', 'env-major', 'env-minor'):\n"
        f"    os.environ['{environ.CUDA_LAYOUT}'] = layout\n"
        "    print(repr(layout), cuda.CUDABackend().layout)\n"
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [
        "'' obs-minor",
        "'env-major' env-major",
        "'env-minor' env-minor",
    ]

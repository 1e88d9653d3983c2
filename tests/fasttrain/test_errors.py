"""fasttrain.errors: what an exception says, in one line."""

import errno
import os

import pytest

from fasttrain.errors import ConfigError, RunError, one_line, reason


def test_a_run_error_is_a_config_error_is_a_value_error():
    assert issubclass(RunError, ConfigError) and issubclass(ConfigError, ValueError)


def test_an_os_error_is_its_reason_in_lower_case_and_its_file():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "runs/x/checkpoint.pt")
    assert one_line(full) == "no space left on device: runs/x/checkpoint.pt"
    assert one_line(PermissionError(errno.EACCES, "Permission denied")) == "permission denied"
    assert reason(full) == "no space left on device"


def test_an_os_error_without_errno_says_its_text():
    assert one_line(OSError("Disk Quota gone")) == "Disk Quota gone"


@pytest.mark.parametrize(
    "exc, line",
    [
        (ValueError("first line\nsecond line"), "first line"),
        (ValueError("\n  \n  indented first  \nnext"), "indented first"),
        (MemoryError(), "out of memory"),
        (MemoryError("CUDA out of memory. Tried 2 GiB"), "CUDA out of memory. Tried 2 GiB"),
        (KeyError(), "KeyError"),
    ],
)
def test_any_other_error_is_its_first_line_that_says_something(exc, line):
    assert one_line(exc) == line

"""fasttrain.kernels.compiling: the compile notice shows when Numba really compiles, once, with
its seconds on the same line, and goes where the caller sends it."""

import numba
import numpy as np
import pytest

from fasttrain.kernels.compiling import compile_now, notice, notices_to


def fresh_dispatcher():
    """A function Numba has never compiled (no disk cache: every process compiles it)."""

    def add_one(x):
        return x + 1

    return numba.njit(add_one, cache=False)


def test_a_compile_says_so_once_then_its_seconds_and_a_compiled_one_says_nothing():
    said = []
    add_one = fresh_dispatcher()
    with notices_to(lambda text, end="\n": said.append((text, end))):
        compile_now("toy", "cpu", [(add_one, (np.int64(1),)), (add_one, (np.float64(1),))])
        assert said[0] == (notice("toy", "cpu"), "")
        assert len(said) == 2 and said[1][1] == "\n"
        assert said[1][0].startswith(" ") and said[1][0].endswith(" s")
        float(said[1][0][1:-2])  # the seconds it took
        compile_now("toy", "cpu", [(add_one, (np.int64(5),))])  # compiled already
    assert len(said) == 2
    assert add_one(np.int64(1)) == 2 and len(add_one.signatures) == 2


def test_the_notice_names_what_compiles_and_for_which_backend():
    assert notice("snake", "cpu") == (
        "compiling snake for the cpu backend (first run only; cached afterwards)..."
    )


def test_notices_go_to_stderr_outside_notices_to(capsys):
    add_one = fresh_dispatcher()
    with notices_to(lambda text, end="\n": None):
        pass  # the block's sink is gone after it
    compile_now("toy", "cpu", [(add_one, (np.int64(1),))])
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(notice("toy", "cpu") + " ") and err.endswith(" s\n")


def test_a_failed_compile_ends_its_notice_with_failed():
    said = []

    def bad(x):
        return x.no_such_attribute

    with notices_to(lambda text, end="\n": said.append(text)):
        with pytest.raises(numba.core.errors.TypingError):
            compile_now("bad", "cpu", [(numba.njit(bad, cache=False), (np.int64(1),))])
    assert said == [notice("bad", "cpu"), " failed"]

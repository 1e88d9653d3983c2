"""fasttrain.kernels.compiling: the compile notice shows when Numba really compiles, once, with
its seconds on the same line, and goes where the caller sends it; a damaged cache file is
compiled again with a one-line note."""

import importlib.util

import numba
import numpy as np
import pytest

from fasttrain.kernels.compiling import cache_files, compile_now, notice, notices_to


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


def _cached_dispatcher(tmp_path):
    """A fresh dispatcher, cached on disk, of a function in a file of its own under tmp_path."""
    source = tmp_path / "cached_add.py"
    if not source.exists():
        source.write_text("def add(a, b):\n    return a + b\n")
    spec = importlib.util.spec_from_file_location("cached_add", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return numba.njit(module.add, cache=True)


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_a_damaged_cache_file_is_deleted_and_compiled_again_with_a_note(tmp_path, suffix):
    args = (np.int64(1), np.int64(2))
    compile_now("add", "cpu", [(_cached_dispatcher(tmp_path), args)])  # writes the cache
    files = cache_files(_cached_dispatcher(tmp_path))
    assert sorted(f.suffix for f in files) == [".nbc", ".nbi"]
    damaged = next(f for f in files if f.suffix == suffix)
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # truncated
    said = []
    add = _cached_dispatcher(tmp_path)
    with notices_to(lambda text, end="\n": said.append(text)):
        compile_now("add", "cpu", [(add, args)])
    assert said[0].startswith("note: the kernel cache of add (cpu) was damaged (")
    assert said[0].endswith(f"deleted 2 files under {damaged.parent} and compiling it again")
    assert said[1] == notice("add", "cpu") and add(*args) == 3
    said.clear()
    with notices_to(lambda text, end="\n": said.append(text)):  # the new files load
        compile_now("add", "cpu", [(_cached_dispatcher(tmp_path), args)])
    assert said == []

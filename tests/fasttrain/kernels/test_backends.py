"""fasttrain.kernels.backends: backend names, ``auto``, one compile per game and process, checked
kernels and Numba's errors as one line."""

import dataclasses
import inspect
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fasttrain.games.snake import SPEC
from fasttrain.kernels import Field, GameSpec, KernelEnv, backends
from fasttrain.kernels.backends import BACKENDS, get_backend, resolve_backend
from tests.cli import ROOT

UNKNOWN = "unknown backend 'gpu'; valid: python, cpu, cuda or 'auto'"


def test_an_unknown_backend_is_refused_in_one_line_naming_the_valid_ones():
    for ask in (get_backend, resolve_backend):
        with pytest.raises(ValueError) as excinfo:
            ask("gpu")
        assert str(excinfo.value) == UNKNOWN
    with pytest.raises(ValueError, match="^unknown backend 'auto'"):
        get_backend("auto")  # auto is a choice to resolve, not a backend


def test_auto_is_cuda_exactly_when_a_gpu_is_usable(monkeypatch):
    monkeypatch.setattr(backends, "cuda_available", lambda: False)
    assert resolve_backend("auto") == "cpu"
    monkeypatch.setattr(backends, "cuda_available", lambda: True)
    assert resolve_backend("auto") == "cuda"
    for name in BACKENDS:
        assert resolve_backend(name) == name  # a named backend is taken as it is


def test_the_simulator_is_not_a_usable_gpu(monkeypatch):
    monkeypatch.setattr(backends, "simulator", lambda: True)
    monkeypatch.setattr(backends, "cuda_problem", lambda: None)
    assert not backends.cuda_available()
    monkeypatch.setattr(backends, "simulator", lambda: False)
    assert backends.cuda_available()
    monkeypatch.setattr(backends, "cuda_problem", lambda: "no CUDA GPU is visible")
    assert not backends.cuda_available()


def test_a_backend_is_made_once_and_compiles_a_game_once():
    python = get_backend("python")
    assert get_backend("python") is python and get_backend("cpu") is not python
    assert (python.name, python.device, python.xp) == ("python", "cpu", np)
    launchers = python.compile(SPEC)
    assert python.compile(SPEC) is launchers
    # a replaced game is another game: its launchers are its own
    other = dataclasses.replace(SPEC, name="snake_backends_test")
    assert python.compile(other) is not launchers


# --------------------------------------------------------------- checked kernels


@dataclass(frozen=True)
class PokeParams:
    size: int = 4
    """cells per environment"""


def poke_reset(i, io, s, p):
    """Start on cell 0."""
    s.where[i] = 0
    io.obs[i, 0] = 0.0


def poke_step(i, io, s, p):
    """Add one to the current cell: a ``where`` outside [0, size) indexes outside the row."""
    s.cells[i, s.where[i]] += 1
    io.obs[i, 0] = s.cells[i, 0]
    io.rewards[i] = 0.0
    io.terminated[i] = False
    io.truncated[i] = False


POKE = GameSpec(
    name="test_poke",
    params_cls=PokeParams,
    state=(
        Field("where", lambda p: (), np.int32, "() the current cell"),
        Field("cells", lambda p: (p.size,), np.int32, "(cells,) counts"),
    ),
    obs_shape=lambda p: (1,),
    obs_dtype=np.float32,
    num_actions=2,
    reset_one=poke_reset,
    step_one=poke_step,
    render_text=lambda state, params: str(state["cells"]),
)

# a step that indexes outside an array, under FASTTRAIN_CHECKED_KERNELS=1
CHECKED_RUN = """
from fasttrain.kernels import KernelEnv
from fasttrain.kernels.backends import OutOfBoundsError
from tests.fasttrain.kernels.test_backends import POKE, PokeParams

env = KernelEnv(POKE, 2, "cpu", PokeParams(), 0)
print("FILE", env.launchers.dispatchers[0].py_func.__code__.co_filename)
env.reset()
assert env.step() == -1 and env.arrays["cells"][:, 0].tolist() == [1, 1]
env.arrays["where"][1] = 1000  # bypasses load_state_dict's checks
try:
    env.step()
except OutOfBoundsError as exc:
    print("REFUSED", exc)
"""


def test_checked_kernels_raise_on_an_out_of_bounds_index_from_their_own_cache_file(monkeypatch):
    monkeypatch.delenv(backends.CHECKED_KERNELS, raising=False)
    unchecked = get_backend("cpu").compile(POKE)  # writes the launcher file; compiles nothing
    env = {**os.environ, backends.CHECKED_KERNELS: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHECKED_RUN], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["REFUSED"].startswith("game 'test_poke': the step indexed an array out of bounds")
    assert backends.CHECKED_KERNELS in lines["REFUSED"]
    unchecked_file = unchecked.dispatchers[0].py_func.__code__.co_filename
    assert lines["FILE"] != unchecked_file  # never the unchecked build's cached file
    assert Path(lines["FILE"]).parent == Path(unchecked_file).parent


@pytest.mark.parametrize("value", ["yes", "2", "true"])
def test_a_bad_checked_kernels_setting_is_refused_in_one_line(monkeypatch, value):
    monkeypatch.setenv(backends.CHECKED_KERNELS, value)
    with pytest.raises(ValueError, match=f"^FASTTRAIN_CHECKED_KERNELS={value}: neither 0 nor 1; "):
        get_backend("cpu").compile(POKE)


# --------------------------------------------------------------- Numba's errors as one line


def poke_count(i, s):
    """A helper calling an array method Numba does not have."""
    return s.cells.count_nonzero()


def poke_step_unknown_method(i, io, s, p):
    io.obs[i, 0] = poke_count(i, s)


def poke_step_string(i, io, s, p):
    io.obs[i, 0] = len(str(s.where[i]))


@pytest.mark.parametrize(
    "step_one, where, says",
    [
        (
            poke_step_unknown_method,
            poke_count,
            "uses what Numba cannot compile in a game function: Unknown attribute "
            "'count_nonzero' of type array(int32, 2d, C)",
        ),
        (poke_step_string, poke_step_string, "may not allocate (array arithmetic, arrays"),
    ],
    ids=["unknown-method", "string"],
)
def test_what_numba_cannot_compile_is_one_line_naming_the_function_and_its_line(
    tmp_path, monkeypatch, step_one, where, says
):
    import numba

    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(backends.CHECKED_KERNELS, raising=False)
    spec = dataclasses.replace(POKE, name=f"test_poke_{step_one.__name__}", step_one=step_one)
    with pytest.raises(backends.GameCompileError) as excinfo:
        KernelEnv(spec, 2, "cpu", PokeParams(), 0)
    line = inspect.getsourcelines(where)[1] + (2 if where is poke_count else 1)
    message = str(excinfo.value)
    assert message.startswith(f"game '{spec.name}': {where.__name__} ({__file__}:{line}) {says}")
    assert "\n" not in message and "\x1b" not in message
    assert isinstance(excinfo.value.__cause__, numba.NumbaError)  # Numba's own error, whole

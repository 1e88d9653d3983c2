"""The real CUDA compile path, with no GPU: numba-cuda and NVVM turn every game into PTX.

The simulator (``test_cuda.py``) runs the kernels' Python semantics; these tests run numba-cuda's
hardware compiler on the same generated kernels, so type errors that only the CUDA target sees
(unsupported operations, int widths, tuple returns) fail in CI, not on a GPU machine. They need
``numba-cuda[cu12]`` (in the ``test`` extra) and skip without it.
"""

import functools
import importlib.util
import os
import re

import pytest

from fasttrain import games

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("numba_cuda") is None,
        reason="needs numba-cuda with NVVM: pip install 'numba-cuda[cu12]'",
    ),
    pytest.mark.skipif(
        os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="needs the real CUDA target"
    ),
]


def _entries(ptx: str) -> list[str]:
    return re.findall(r"\.entry\s+(\S+?)\(", ptx)


# Compiling a game to PTX takes seconds (Seaquest tens of them): each game and compute
# capability is compiled once for the tests of this file, which read the same PTX.


@functools.cache
def compilers() -> tuple:
    """The real ``compile_ptx`` and ``compile_column_ptx`` (kept before a test replaces them)."""
    from fasttrain.kernels.ptx import compile_column_ptx, compile_ptx

    return compile_ptx, compile_column_ptx


@functools.cache
def game_ptx(game: str, cc: tuple[int, int]) -> dict[str, str]:
    """``compile_ptx`` of a registered game with its default params, compiled once."""
    return compilers()[0](games.get(game), cc=cc)


@functools.cache
def column_ptx(cc: tuple[int, int], name: str = "gae") -> str:
    """``compile_column_ptx`` of a learner kernel (``gae`` or ``qlambda``) for its example
    arguments, compiled once."""
    from fasttrain.kernels import gae, qlambda

    module = {"gae": gae, "qlambda": qlambda}[name]
    kernel = gae.GAE if name == "gae" else qlambda.QLAMBDA
    return compilers()[1](kernel, module.example_args(), cc)


@pytest.mark.parametrize("game", games.names())
def test_every_game_compiles_to_ptx_for_the_hardware_target(game):
    ptx = game_ptx(game, (9, 0))
    assert set(ptx) == {"step_kernel", "reset_kernel"}
    for kernel, text in ptx.items():
        assert ".target sm_90" in text
        entries = _entries(text)
        assert len(entries) == 1 and kernel in entries[0], entries
    # one thread per env, bounds-guarded: the kernel reads its global thread index
    assert "%ctaid.x" in ptx["step_kernel"] and "%tid.x" in ptx["step_kernel"]


def test_the_compute_capability_reaches_the_compiler():
    assert ".target sm_80" in game_ptx("snake", (8, 0))["step_kernel"]
    assert ".target sm_90" in game_ptx("snake", (9, 0))["step_kernel"]


def test_game_params_are_compiled_in_as_kernel_arguments():
    """A board size is a runtime argument, not a constant: one PTX serves every size."""
    from fasttrain.kernels.ptx import compile_ptx

    spec = games.get("snake")
    small = compile_ptx(spec, spec.make_params(height=6, width=6))["step_kernel"]
    large = compile_ptx(spec, spec.make_params(height=20, width=20))["step_kernel"]

    def unnamed(ptx):  # mangled names carry a per-compile version counter
        return re.sub(r"_Z\w+", "_Z", ptx)

    assert unnamed(small) == unnamed(large)


@pytest.mark.parametrize("where", ["step_one", "reset_one"])
def test_a_game_of_more_params_and_state_arrays_than_a_call_once_took_compiles_to_ptx(where):
    """Its objects hold 40 params and 41 state arrays (the RNG too): past the 30 arguments above
    which Python compiles a call as ``f(*args)``. Every write through them stays: ``where``
    stores each param into its own state array."""
    from fasttrain.kernels.ptx import compile_ptx
    from tests.fasttrain.kernels.test_env import WIDE, wide_game

    ptx = compile_ptx(wide_game(WIDE, where), cc=(9, 0))
    kernel = "step_kernel" if where == "step_one" else "reset_kernel"
    assert WIDE > 30 and ".target sm_90" in ptx[kernel]
    assert len(re.findall(r"\bst\.global", ptx[kernel])) >= WIDE


@pytest.mark.parametrize("name", ["gae", "qlambda"])
def test_the_learner_kernels_compile_to_ptx(name):
    ptx = column_ptx((9, 0), name)
    assert ".target sm_90" in ptx and len(_entries(ptx)) == 1
    assert "column_kernel" in _entries(ptx)[0]
    assert "%ctaid.x" in ptx and "%tid.x" in ptx  # one thread per column


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_the_copy_of_env_minor_observations_into_rows_compiles_to_ptx(dtype):
    from fasttrain.kernels.ptx import compile_copy_rows_ptx, find_ptxas, ptxas_info

    ptx = compile_copy_rows_ptx(dtype, (9, 0))
    assert ".target sm_90" in ptx and "copy_rows_kernel" in _entries(ptx)[0]
    # the tile goes through shared memory between one barrier: both sides read by warps
    assert ".shared" in ptx and "bar.sync" in ptx and "%tid.y" in ptx
    assert "st.shared.u8" in ptx if dtype == "uint8" else "st.shared.f32" in ptx
    if find_ptxas() is not None:
        info = ptxas_info(ptx, (9, 0))
        assert re.search(r"\b0 bytes spill stores", info), info


def test_a_kernel_the_cuda_target_cannot_type_fails_to_compile():
    """compile_ptx really compiles: a game step that only Python can run is refused."""
    import dataclasses

    from numba.core.errors import TypingError

    from fasttrain.kernels.ptx import compile_ptx

    spec = games.get("snake")

    def step_one(i, io, s, p):
        io.rewards[i] = len(str(io.actions[i]))  # strings do not exist on the GPU

    broken = dataclasses.replace(spec, name="broken_snake", step_one=step_one)
    with pytest.raises(TypingError):
        compile_ptx(broken)


def test_ptxas_assembles_every_kernel():
    from fasttrain.kernels.ptx import find_ptxas, ptxas_info

    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc-cu12)")
    texts = [column_ptx((9, 0), "gae"), column_ptx((9, 0), "qlambda")]
    for game in games.names():
        texts += game_ptx(game, (9, 0)).values()
    for text in texts:
        info = ptxas_info(text, (9, 0))
        assert re.search(r"Used \d+ registers", info), info


def test_the_report_has_a_line_per_kernel_of_the_games_it_is_given(monkeypatch):
    from fasttrain.kernels import ptx
    from fasttrain.kernels.ptx import find_ptxas, report

    # the report compiles what it is given through these two: the same PTX, compiled once here
    compilers()
    monkeypatch.setattr(ptx, "compile_ptx", lambda spec, cc, layout: game_ptx(spec.name, cc))

    def compiled(kernel, args, cc):
        return column_ptx(cc, kernel.name.removesuffix("_env"))

    monkeypatch.setattr(ptx, "compile_column_ptx", compiled)
    lines = report([games.get("snake")], (8, 0))
    names = [tuple(line.split()[:2]) for line in lines]
    kernels = [("snake", "step_kernel"), ("snake", "reset_kernel"), ("gae", "column_kernel")]
    assert names == [*kernels, ("qlambda", "column_kernel"), ("rows_uint8", "copy_rows")]
    assert all("sm_80: PTX" in line for line in lines)
    if find_ptxas() is not None:
        assert all(re.search(r"\d+ registers, \d+ B spill stores$", line) for line in lines)

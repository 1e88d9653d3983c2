"""fasttrain.kernels.backends: backend names, ``auto``, and one compile per game and process."""

import dataclasses

import numpy as np
import pytest

from fasttrain.games.snake import SPEC
from fasttrain.kernels import backends
from fasttrain.kernels.backends import BACKENDS, get_backend, resolve_backend

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

"""fasttrain.run.checkpoint: a checkpoint from anyone is safe to open through every reader of the
API, a written checkpoint holds no pickle, and the pickled formats the project wrote while it was
developed (``tests/data/format2``: PPO, a GRU policy, DQN with a prioritized replay buffer and an
arena curriculum, written before format 3) are refused in one line without being unpickled.

The hostile checkpoints are real attacks: a pickle whose payload would create a marker file,
wrapped in the project's own header with a valid digest, or a bare ``torch.save`` file.
``tests/integration/test_safety.py`` gives the same files to every command."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain.errors import ConfigError
from fasttrain.run import checkpoint, statefile
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.runner import run as run_training
from tests.cli import ROOT

LEGACY = ROOT / "tests" / "data" / "format2"


TINY = [
    "game.snake.height=6",
    "game.snake.width=6",
    "game.snake.ppo.num_envs=16",
    "game.snake.ppo.num_steps=8",
    "game.snake.ppo.num_minibatches=2",
    "model.hidden=16",
    "log.progress=false",
    "log.curves=false",
    "run.torch_threads=1",
    "run.numba_threads=1",
    "run.compile=off",
]


class Payload:
    """Unpickling this runs ``touch MARKER``: what a hostile checkpoint carries."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_state(marker: Path) -> dict:
    return {"format": 2, "model": {}, "config": "", "identity": Payload(marker)}


def with_header(payload: bytes) -> bytes:
    """The project's own header around ``payload``: magic, length and a valid SHA-256."""
    import hashlib

    digest = hashlib.sha256(payload).digest()
    return checkpoint.MAGIC + len(payload).to_bytes(8, "big") + digest + payload


def torch_bytes(state) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


HOSTILE = {
    "format 2 header": lambda marker: with_header(torch_bytes(hostile_state(marker))),
    "bare torch.save": lambda marker: torch_bytes(hostile_state(marker)),
    "plain pickle": lambda marker: pickle.dumps(hostile_state(marker), protocol=2),
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_every_api_refuses_a_hostile_checkpoint_and_runs_nothing(kind, tmp_path):
    marker = tmp_path / "marker"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / checkpoint.FILENAME).write_bytes(HOSTILE[kind](marker))
    config = fasttrain.config.resolve.load(sets=TINY)
    readers = {
        "load": lambda: checkpoint.load(run_dir),
        "load file": lambda: checkpoint.load(run_dir / checkpoint.FILENAME),
        "load_agent": lambda: load_agent(run_dir),
        "describe": lambda: checkpoint.describe(run_dir),
        "runner.run": lambda: run_training(config, resume=run_dir, echo=lambda *a, **k: None),
    }
    for name, read in readers.items():
        with pytest.raises(ConfigError) as refusal:
            read()
        assert len(str(refusal.value).splitlines()) == 1, (name, str(refusal.value))
        assert not marker.exists(), f"{name} ran the code in a {kind} file"
        assert "never unpickles a file" in str(refusal.value), name


def test_a_format_3_file_names_no_object_only_json_and_array_bytes(tmp_path):
    """The payload of a written checkpoint has no pickle opcode stream: its JSON header and
    arrays alone, and decoding it builds only containers, scalars, tensors and arrays."""
    path = tmp_path / checkpoint.FILENAME
    state = {"model": {"w": torch.ones(2)}, "config": "", "env": {"obs": np.zeros(3, np.uint8)}}
    checkpoint.save(path, state)
    payload = path.read_bytes()[checkpoint.HEADER :]
    assert payload.startswith(statefile.STATE_MAGIC)
    assert b"\x80\x02" not in payload[:64] and not payload.startswith(b"PK")
    header = statefile.read_header(payload)
    kinds = {(entry["kind"], entry["dtype"]) for entry in header["arrays"]}
    assert kinds == {("torch", "float32"), ("numpy", "uint8")}


@pytest.mark.parametrize("name", ["ppo", "gru", "dqn", "arena"])
def test_a_development_format_2_checkpoint_is_refused_unread(name, monkeypatch):
    """The project was never released: its pickled formats are refused, and no byte of them
    reaches an unpickler (torch's restricted one included)."""
    source = LEGACY / f"{name}.pt"
    assert source.read_bytes().startswith(checkpoint.MAGIC)

    def unpickle(*args, **kwargs):
        raise AssertionError("a checkpoint reached an unpickler")

    monkeypatch.setattr(torch, "load", unpickle)
    monkeypatch.setattr(pickle, "load", unpickle)
    monkeypatch.setattr(pickle, "loads", unpickle)
    for read in (checkpoint.load, load_agent, checkpoint.describe):
        with pytest.raises(ConfigError) as refusal:
            read(source)
        assert str(refusal.value) == (
            f"checkpoint {source} holds a pickle (fasttrain's development format 2); fasttrain "
            "reads only its own format 3 and never unpickles a file"
        )

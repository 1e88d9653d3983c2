"""A checkpoint from anyone is safe to open, every file is written safely, and what a hostile or
careless user can type ends in one line.

The hostile checkpoints are real attacks: a pickle whose payload would create a marker file,
wrapped in the project's own header with a valid digest, or a bare ``torch.save`` file. Every
reader of a checkpoint (``run --resume``, ``eval``, ``play`` with a folder or a file,
``checkpoint inspect``, ``load_agent``, ``runner.run``) must refuse it in one line with the marker
never made. The old pickled formats the project wrote (``tests/data/format2``: PPO, a GRU policy,
DQN with a prioritized replay buffer and an arena curriculum, written by the version before
format 3) must still load, play and resume.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain import checkpoint, statefile
from fasttrain.checkpoint import load_agent
from fasttrain.cli import main
from fasttrain.errors import ConfigError, RunError
from fasttrain.rundir import RunLock, open_text, temp_path, write_atomic
from fasttrain.runner import run as run_training
from tests.cli import ROOT, cli_pool, one_line, start_cli

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


def sets(*extra: str) -> list[str]:
    return [arg for item in (*TINY, *extra) for arg in ("--set", item)]


def invoke(*args) -> tuple[int, str]:
    """``fasttrain ARGS`` in this process: its exit code and its one error line (a traceback,
    or more than one line, fails the test)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback: {result.exception!r}") from result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Usage:", "Try '"))]
    assert len(lines) <= 1, result.stderr
    return result.exit_code, lines[0] if lines else ""


# ------------------------------------------------------------------------------- hostile files


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
REFUSED = re.compile(
    r"Error: checkpoint \S+checkpoint\.pt (holds objects fasttrain does not write \(posix\."
    r"system\); refusing to load it|is corrupt or not a fasttrain checkpoint \(\w+\))"
)


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    """A run directory per hostile file, each given to every command that reads checkpoints
    (subprocesses, as a user runs them): {(kind, command): (marker, result)}."""
    calls, markers = {}, {}
    for kind, make in HOSTILE.items():
        root = tmp_path_factory.mktemp("hostile")
        marker = root / "marker"
        run_dir = root / "run"
        run_dir.mkdir()
        (run_dir / checkpoint.FILENAME).write_bytes(make(marker))
        markers[kind] = marker
        file = run_dir / checkpoint.FILENAME
        commands = {
            "run --resume": ["run", "--resume", run_dir, "--steps", 256],
            "eval --run": ["eval", "--run", run_dir, "--episodes", 1],
            "play --checkpoint DIR": ["play", "--checkpoint", run_dir, "--steps", 1],
            "play --checkpoint FILE": ["play", "--checkpoint", file, "--steps", 1],
            "checkpoint inspect": ["checkpoint", "inspect", run_dir],
        }
        if kind != "format 2 header":  # every command once; the other files through two
            commands = {k: commands[k] for k in ("run --resume", "play --checkpoint FILE")}
        for command, args in commands.items():
            calls[kind, command] = args
    results = cli_pool(calls)
    return {key: (markers[key[0]], result) for key, result in results.items()}


def test_every_command_refuses_a_hostile_checkpoint_in_one_line_and_runs_nothing(hostile_runs):
    assert len(hostile_runs) == 9
    for (kind, command), (marker, result) in hostile_runs.items():
        assert REFUSED.fullmatch(one_line(result)), (kind, command, result.stderr)
        assert not marker.exists(), f"{command} ran the code in a {kind} file"


@pytest.mark.parametrize("kind", HOSTILE)
def test_every_api_refuses_a_hostile_checkpoint_and_runs_nothing(kind, tmp_path):
    marker = tmp_path / "marker"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / checkpoint.FILENAME).write_bytes(HOSTILE[kind](marker))
    config = fasttrain.config.load(sets=TINY)
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
    if kind != "plain pickle":  # torch names what a zip pickle asked for
        assert "(posix.system); refusing to load it" in str(refusal.value)


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


# ------------------------------------------------------------------------------- the state format


def every_kind_of_leaf() -> dict:
    torch_dtypes = list(statefile.TORCH_DTYPES.values())
    return {
        "tensors": {
            str(d): (torch.arange(6, dtype=torch.float64) * 1.5 - 3).to(d).reshape(2, 3)
            for d in torch_dtypes
        },
        "scalar tensor": torch.tensor(7.25),
        "empty tensor": torch.zeros((0, 4), dtype=torch.bfloat16),
        "strided tensor": torch.arange(12).reshape(3, 4).t(),
        "arrays": {
            name: (np.arange(6) % 2).astype(d) for name, d in statefile.NUMPY_DTYPES.items()
        },
        "uint64 max": np.array([2**64 - 1, 0], dtype=np.uint64),
        "int keys": {0: {"step": torch.tensor(3.0)}, 17: "x"},
        "tuple": (0.9, 0.999),
        "list": [1, "two", None, True, False, [3.5, {"deep": (1,)}]],
        "floats": [math.nan, math.inf, -math.inf, 1e-310, 3.0],
        "big int": 2**64 - 1,
        "numpy scalars": [np.float32(1.5), np.int64(-4)],
        "size": torch.Size([2, 3]),
        'key named like a tag {"T": 0}': {"T": 0, "A": 1, "d": [], "l": [], "t": []},
    }


def same(a, b) -> bool:
    """Equal values of the same types; tensors and arrays byte for byte (NaN and -0.0 too)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or (a.dtype, a.shape) != (b.dtype, b.shape):
            return False
        return torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
        )
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            type(b) is (tuple if isinstance(a, tuple) else list)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b and type(b) in (type(a), float if isinstance(a, np.floating) else int)


def test_the_state_format_gives_back_every_leaf_bit_for_bit():
    state = every_kind_of_leaf()
    decoded = statefile.decode(b"".join(bytes(c) for c in statefile.encode(state)))
    assert same(state, decoded)
    assert type(decoded["numpy scalars"][0]) is float and type(decoded["numpy scalars"][1]) is int


def test_the_state_format_refuses_what_fasttrain_never_writes():
    for value in (object(), {1.5: "float key"}, np.array(["text"]), torch.zeros(2, 2).to_sparse()):
        with pytest.raises(TypeError):
            statefile.encode({"x": value})


def craft(tree, arrays=(), blob=b"") -> bytes:
    """A payload with this header, as an attacker would write it."""
    header = json_bytes({"tree": tree, "arrays": list(arrays)})
    return statefile.STATE_MAGIC + len(header).to_bytes(8, "big") + header + blob


def json_bytes(value) -> bytes:
    import json

    return json.dumps(value).encode()


def json_nested(depth: int):
    node = 1
    for _ in range(depth):
        node = {"l": [node]}
    return node


ONE = {"kind": "torch", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}
CRAFTED = {
    "unknown tag": craft({"X": 1}),
    "a tag beside another": craft({"l": [], "d": []}),
    "unknown dtype": craft({"T": 0}, [{**ONE, "dtype": "object"}], bytes(8)),
    "unknown kind": craft({"T": 0}, [{**ONE, "kind": "pickle"}], bytes(8)),
    "bytes past the end": craft({"T": 0}, [ONE], bytes(4)),
    "size and shape disagree": craft({"T": 0}, [{**ONE, "nbytes": 4}], bytes(8)),
    "negative shape": craft({"T": 0}, [{**ONE, "shape": [-2]}], bytes(8)),
    "array index past the list": craft({"T": 3}, [ONE], bytes(8)),
    "torch tag on a numpy array": craft({"T": 0}, [{**ONE, "kind": "numpy"}], bytes(8)),
    "dict entry not a pair": craft({"d": [["a", 1, 2]]}),
    "float dict key": craft({"d": [[1.5, 1]]}),
    "nested too deep": craft(json_nested(200)),
    "header not JSON": statefile.STATE_MAGIC + (4).to_bytes(8, "big") + b"{{{{",
    "header longer than the file": statefile.STATE_MAGIC + (99).to_bytes(8, "big") + b"{}",
}


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_state_is_refused_in_one_line(name, tmp_path):
    with pytest.raises(statefile.StateFileError):
        statefile.decode(CRAFTED[name])
    path = tmp_path / checkpoint.FILENAME
    path.write_bytes(with_header(CRAFTED[name]))
    with pytest.raises(
        ConfigError, match=r"^checkpoint \S+ is not a fasttrain checkpoint: [^\n]+$"
    ):
        checkpoint.load(path)


# ------------------------------------------------------------------------------- old formats


@pytest.mark.parametrize("name", ["ppo", "gru", "dqn", "arena"])
def test_an_older_pickled_checkpoint_still_loads_plays_and_resumes_in_format_3(name, tmp_path):
    source = LEGACY / f"{name}.pt"
    assert source.read_bytes().startswith(checkpoint.MAGIC)
    state = checkpoint.load(source)
    assert state["format"] == 2 and state["global_step"] > 0
    assert all(isinstance(a, np.ndarray) for a in state["env"].values())
    agent, params = load_agent(source)
    spec = fasttrain.games.get(checkpoint.saved_config(source, state).game.name)
    env = fasttrain.make(spec.name, num_envs=2, seed=1, **params)
    actions = agent(env.obs, *([None] if agent.is_recurrent else []))
    assert actions.shape == (env.num_rows,) and int(actions.max()) < env.num_actions
    # resumed with the settings it was written with, one more iteration
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(source, run_dir / checkpoint.FILENAME)
    config = checkpoint.saved_config(source, state)
    iteration = state["global_step"] // state["iteration"]
    more = {"total_timesteps": state["global_step"] + iteration}
    layers = [("checkpoint", fasttrain.config.tomllib.loads(state["config"]))]
    flags = {"game": {config.game.name: {config.run.algo: more}}, "log": {"progress": False}}
    resumed = fasttrain.config.build([*layers, ("test", flags)])
    summary = run_training(resumed, resume=run_dir, echo=lambda *a, **k: None)
    assert summary["global_step"] == state["global_step"] + iteration
    after = checkpoint.load(run_dir)
    assert after["format"] == checkpoint.FORMAT
    assert after["iteration"] == state["iteration"] + 1


# ------------------------------------------------------------------------------- safe writes


def test_write_atomic_never_writes_through_a_symlink_or_onto_a_device(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    link = tmp_path / "summary.json"
    link.symlink_to(target)
    with pytest.raises(RunError, match=r"it is a symbolic link, not a regular file$"):
        write_atomic(link, "x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RunError, match=r"it is a FIFO, not a regular file$"):
        write_atomic(fifo, "x")
    assert target.read_text() == "precious\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # a symlink planted at the temp name is removed, not followed; the write goes through
    out = tmp_path / "out.json"
    temp_path(out).symlink_to(target)
    write_atomic(out, "new\n")
    assert out.read_text() == "new\n" and target.read_text() == "precious\n"
    assert not os.path.lexists(temp_path(out))


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_eval_json_onto_a_device_node_is_refused_and_the_node_stays(tmp_path):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    code, line = invoke("eval", "--game", "cartpole", "--random", "--episodes", 1, "--json", node)
    assert (
        code == 1
        and line == f"Error: cannot write {node}: it is a character device, not a regular file"
    )
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_a_lock_or_metrics_csv_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / ".lock").symlink_to(target)
    with pytest.raises(RunError, match=r"\.lock: it is a symbolic link, not a regular file$"):
        RunLock(locked).acquire()
    metrics = tmp_path / "metrics.csv"
    metrics.symlink_to(target)
    with pytest.raises(RunError, match=r"it is a symbolic link, not a regular file$"):
        open_text(metrics, append=False)
    # a new run into a folder holding such a metrics.csv stops before writing it
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").symlink_to(target)
    code, line = invoke("run", "--out", run_dir, "--steps", 128, *sets())
    assert code == 1 and line.endswith("metrics.csv: it is a symbolic link, not a regular file")
    assert target.read_text() == "precious\n"


def test_a_wandb_id_that_is_not_an_id_is_refused_before_wandb_starts(tmp_path):
    pytest.importorskip("wandb")
    from fasttrain.config import LogConfig
    from fasttrain.dashboards import WandB

    (tmp_path / "wandb_id").write_text("../../../evil-id\n")
    with pytest.raises(ConfigError, match=r"not a W&B run id"):
        WandB(tmp_path, {}, LogConfig(wandb="offline"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wandb_id"]


# ------------------------------------------------------------------------------- one-line errors


def test_what_a_user_can_type_ends_in_one_line(tmp_path):
    """Each case used to end in a traceback, a hang or a silent wrong result."""
    noise = tmp_path / "noise" / "metrics.csv"
    noise.parent.mkdir()
    noise.write_bytes(bytes(range(256)) * 8)
    study = tmp_path / "sweep"
    study.mkdir()
    (study / "study.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    sweep_file = ROOT / "examples" / "sweep_cartpole.toml"
    cases = {
        "play --fps nan": (["play", "--fps", "nan"], 2, "Invalid value for --fps: 0 (as fast"),
        "play --fps 1e-300": (["play", "--fps", "1e-300"], 2, "0.1 to 1000, got 1e-300"),
        "play --seed -1": (["play", "--seed", "-1"], 2, "-1 is not in the range 0<=x<="),
        "play --seed 2**64": (["play", "--seed", str(2**64)], 2, "is not in the range"),
        "play --gif unwritable": (
            ["play", "--gif", "/proc/fasttrain.gif", "--steps", 2],
            1,
            "Error: cannot write /proc/fasttrain.gif",
        ),
        "play --gif a million steps": (
            ["play", "--gif", tmp_path / "a.gif", "--steps", 1_000_000],
            1,
            "Error: --steps 1,000,000: a GIF holds at most 5,000 steps",
        ),
        "eval --json missing folder": (
            ["eval", "--game", "cartpole", "--random", "--json", tmp_path / "no" / "x.json"],
            1,
            f"Error: cannot write {tmp_path / 'no' / 'x.json'}: folder",
        ),
        "eval --num-envs 1e10": (
            ["eval", "--game", "snake", "--random", "--num-envs", 10**10],
            1,
            "Error: 10,000,000,000 snake envs need",
        ),
        "plot random bytes": (
            ["plot", noise.parent, "--out", tmp_path / "c.png"],
            1,
            f"Error: {noise} is not a metrics.csv",
        ),
        "sweep damaged study.db": (
            ["sweep", "--config", sweep_file, "--out", study],
            1,
            f"Error: {study / 'study.db'} is not a study database this sweep can read",
        ),
        "sweep --out unwritable": (
            ["sweep", "--config", sweep_file, "--out", "/proc/fasttrain-sweep"],
            1,
            "Error: cannot create sweep directory /proc/fasttrain-sweep",
        ),
        "run --out /proc/x": (
            ["run", "--out", "/proc/fasttrain-run", *sets()],
            1,
            "Error: cannot create run directory /proc/fasttrain-run",
        ),
        "config nested 100,000 deep": (
            ["run", "--config", deep],
            1,
            f"Error: config file {deep} nests arrays or tables too deep",
        ),
        "config /dev/zero": (
            ["run", "--config", "/dev/zero"],
            1,
            "Error: config file /dev/zero is a character device, not a regular file",
        ),
        "--set with a newline": (
            ["run", "--set", "ppo.learning_rate=1e-3\nrun.seed = 5"],
            1,
            "Error: --set takes one line, section.key=value",
        ),
        "numba_threads 10000": (
            ["run", "--set", "run.numba_threads=10000"],
            1,
            "Error: run.numba_threads = 10000: Numba has at most",
        ),
        "hidden 1e7": (
            ["run", "--set", "model.hidden=10000000"],
            1,
            "Error: training the model (model.hidden = 10000000) needs",
        ),
        "play --policy random with a checkpoint": (
            ["play", "--policy", "random", "--checkpoint", tmp_path],
            2,
            "Error: --policy random plays without an agent: drop --checkpoint",
        ),
    }
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a default runs/ folder would show here
    try:
        for name, (args, code, words) in cases.items():
            got, line = invoke(*args)
            assert (got, words in line) == (code, True), (name, got, line)
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "a.gif").exists()


def test_a_config_fifo_nobody_writes_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    proc = start_cli("run", "--config", fifo, "--out", tmp_path / "run")
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("fasttrain run --config FIFO hangs") from None
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert one_line(result) == f"Error: config file {fifo} is a FIFO, not a regular file"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-iteration Snake run (seed 0)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    code, line = invoke("run", "--out", out, "--steps", 128, *sets())
    assert code == 0, line
    return out


def test_a_resume_with_another_seed_is_refused(finished, tmp_path):
    run_dir = Path(shutil.copytree(finished, tmp_path / "run"))
    before = (run_dir / checkpoint.FILENAME).read_bytes()
    code, line = invoke("run", "--resume", run_dir, "--seed", 5, "--steps", 256)
    assert code == 1
    assert line == (
        "Error: run.seed = 5 on --resume: the run continues the random streams of its seed 0; "
        "leave --seed (and run.seed) out"
    )
    assert (run_dir / checkpoint.FILENAME).read_bytes() == before
    code, line = invoke("run", "--resume", run_dir, "--seed", 0, "--steps", 256)
    assert code == 0, line  # the same seed says nothing new


def test_a_checkpoint_with_non_finite_weights_cannot_play_or_eval(finished, tmp_path):
    run_dir = Path(shutil.copytree(finished, tmp_path / "run"))
    state = checkpoint.load(run_dir)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], math.nan)
    checkpoint.save(
        run_dir / checkpoint.FILENAME, {k: v for k, v in state.items() if k != "format"}
    )
    expected = (
        f"Error: checkpoint {run_dir / checkpoint.FILENAME} holds non-finite weights "
        f"(model.{name}); it cannot play"
    )
    assert invoke("eval", "--run", run_dir, "--episodes", 1) == (1, expected)
    assert invoke("play", "--checkpoint", run_dir, "--steps", 1) == (1, expected)


def test_inspect_prints_what_a_checkpoint_holds_without_loading_it(finished):
    code = CliRunner().invoke(main, ["checkpoint", "inspect", str(finished)])
    assert code.exit_code == 0, code.output
    lines = code.output.splitlines()
    assert re.fullmatch(
        rf"{re.escape(str(finished / 'checkpoint.pt'))}: format 3, [\d,]+ bytes, checksum verified",
        lines[0],
    )
    assert lines[1] == "run: snake, learner ppo, seed 0, device cpu, 16 envs, 1 rank"
    assert "progress: 128 steps, 1 iterations" in lines
    assert re.search(r"^network model: \d+ tensors, [\d,]+ weights \(float32\)$", code.output, re.M)


# ------------------------------------------------------------------------------- the API


def test_api_misuse_ends_in_one_line():
    with pytest.raises(ValueError, match=r"^snake\.reward_fruit = 1e\+300 does not fit float32"):
        fasttrain.make("snake", num_envs=2, reward_fruit=1e300)
    env = fasttrain.make("snake", num_envs=2, height=6, width=6)
    with pytest.raises(ValueError, match=r"^state_dict lacks environment arrays 'obs'"):
        env.load_state_dict({})
    with pytest.raises(ValueError, match=r"^actions must be on the CPU, not meta$"):
        env.step(torch.zeros(2, dtype=torch.int64, device="meta"))
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match=r"^this environment is closed"):
        env.step(torch.zeros(2, dtype=torch.int64))


def test_a_loaded_agent_refuses_observations_of_another_shape(finished):
    agent, _ = load_agent(finished)
    with pytest.raises(
        ValueError,
        match=r"^this agent plays observations of shape \(rows, 4, 6, 6\), got \(3, 5\)$",
    ):
        agent(torch.zeros(3, 5))
    assert agent(torch.zeros(3, 4, 6, 6, dtype=torch.uint8)).shape == (3,)


def test_adapters_cannot_step_after_close():
    from fasttrain.adapters.gym import GymEnv, GymVectorEnv
    from fasttrain.adapters.pettingzoo import parallel_env
    from fasttrain.adapters.sb3 import SB3VecEnv

    vector = GymVectorEnv(fasttrain.make("cartpole", num_envs=2))
    single = GymEnv("cartpole")
    sb3 = SB3VecEnv(fasttrain.make("cartpole", num_envs=2))
    zoo = parallel_env("arena", num_snakes=2)
    zoo.reset()
    for adapter, step in (
        (vector, lambda: vector.step(np.zeros(2, dtype=np.int64))),
        (single, lambda: single.step(0)),
        (sb3, lambda: sb3.step(np.zeros(2, dtype=np.int64))),
        (zoo, lambda: zoo.step(dict.fromkeys(zoo.agents, 0))),
    ):
        adapter.close()
        with pytest.raises(RuntimeError, match=r"^this environment is closed"):
            step()


# ------------------------------------------------------------------------------- torchrun


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ranks_stop_with_a_checkpoint_when_their_launcher_is_killed(tmp_path):
    out = tmp_path / "run"
    proc = start_cli(
        "run", "--nproc", 2, "--out", out, "--steps", 10**8, *sets("run.checkpoint_interval=1000")
    )
    ranks = []
    try:
        deadline = time.monotonic() + 180
        while not (out / "metrics.csv").exists() or (out / "metrics.csv").stat().st_size == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks never trained"
            time.sleep(0.1)
        ranks = children(proc.pid)
        assert len(ranks) == 2, ranks
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in ranks):
            assert time.monotonic() < deadline, "ranks still running 30 s after their launcher died"
            time.sleep(0.1)
    finally:
        proc.kill()
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    state = checkpoint.load(out)  # they stopped at an iteration boundary and saved
    assert state["global_step"] > 0 and len(state["rank_states"]) == 1

"""Behaviour references: tiny runs of every learner family, recorded once and held bit for bit.

Each case is a ``fasttrain run`` command (PPO feed-forward, recurrent, compiled and overlapped,
DQN, PQN, the arena's curriculum, and a PPO and a PQN population with variants), run straight
to its steps and again in two halves (``--steps`` half, then ``--resume`` to the whole). What
it leaves is compared with files recorded before a change (``tests/data/reference/``): every
metrics.csv row but its time columns, and every network's weights, bit for bit.

Float results depend on the machine's instruction set (matrix kernels, vector widths), so the
cases run in a process whose torch, MKL and oneDNN are held to the same code on every x86 CPU
(``PINNED``): the references recorded on one machine class hold on the others.

    python -m tests.reference check [CASE ...]     # compare against the recorded files
    python -m tests.reference record [CASE ...]    # write them (only for a deliberate change)
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "reference"

# the same arithmetic on every x86 CPU: ATen's and inductor's portable kernels, MKL's
# conditional numerical reproducibility, oneDNN held to SSE4.1, one thread each
PINNED = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TORCHINDUCTOR_CPP_MARCH": "x86-64-v2",
}


def sets(*items: str) -> list[str]:
    """``--set ITEM`` for each item."""
    return [arg for item in items for arg in ("--set", item)]


# a 16-wide network, fp32 on one thread, eager, no pictures: what every case shares
COMMON = sets(
    "model.hidden=16",
    "run.amp='off'",
    "run.torch_threads=1",
    "run.numba_threads=1",
    "log.curves=false",
    "log.progress=false",
    "run.compile='off'",
)
# a 6x6 Snake in 16 envs
SMALL = ["--num-envs", "16", *sets("game.snake.height=6", "game.snake.width=6"), *COMMON]
# 8 steps an iteration (128 agent steps), 2 minibatches, 2 epochs
PPO = ["--game", "snake", "--algo", "ppo", *SMALL]
PPO += sets("ppo.num_steps=8", "ppo.num_minibatches=2", "ppo.update_epochs=2")
PQN = ["--game", "snake", "--algo", "pqn", *SMALL]
PQN += sets("pqn.num_steps=8", "pqn.num_minibatches=2", "pqn.update_epochs=2")
PQN += sets("pqn.start_e=0.5", "pqn.end_e=0.05", "pqn.exploration_fraction=0.5")
DQN = ["--game", "snake", "--algo", "dqn", *SMALL, "--set", "dqn.num_envs=16"]
DQN += sets("dqn.num_steps=8", "dqn.buffer_size=512", "dqn.learning_starts=128")
DQN += sets("dqn.batch_size=32", "dqn.target_network_frequency=256", "dqn.n_step=3")
# a 12x12 arena of 2 snakes in 4 envs, a random bot, then (at once) two greedy ones
ARENA = ["--game", "arena", "--algo", "ppo", "--num-envs", "4", *COMMON] + sets(
    "game.arena.width=12",
    "game.arena.height=12",
    "game.arena.num_snakes=2",
    "game.arena.num_food=4",
    "game.arena.vision=2",
    "game.arena.max_bots=2",
    "ppo.num_steps=8",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "curriculum.stage=[{params={num_bots=1, bot_policy='random'}, promote_at=-1.0, "
    "min_steps=128}, {params={num_bots=2, bot_policy='greedy'}}]",
)

# name -> (the command's arguments, its total steps, slow: only in the slow test tier)
CASES = {
    "ppo": (PPO, 768, False),
    "ppo-gru": (
        PPO + sets("model.core='gru'", "model.core_size=8", "ppo.bptt_horizon=4"),
        768,
        False,
    ),
    "ppo-chunks-muon": (
        PPO + sets("ppo.max_minibatch_size=32", "ppo.optimizer='muon'", "ppo.anneal_ent=true"),
        768,
        False,
    ),
    "ppo-overlap": (PPO + sets("ppo.overlap=true"), 768, False),
    "ppo-compiled": (PPO + sets("run.compile='default'"), 2560, True),
    "dqn": (DQN + sets("dqn.prioritized=true"), 768, False),
    "pqn": (PQN, 768, False),
    "arena-curriculum": (ARENA, 1024, False),
    "ppo-population": (
        PPO
        + [
            "--seeds",
            "3,5",
            "--vary",
            "ppo.learning_rate=0.001,0.0003",
            "--vary",
            "ppo.gamma=0.9,0.99",
        ],
        768,
        False,
    ),
    "ppo-population-cnn": (
        PPO + sets("model.kind='cnn'", "model.channels=4") + ["--seeds", "0,1"],
        512,
        False,
    ),
    "pqn-population": (
        PQN
        + [
            "--seeds",
            "2,4",
            "--vary",
            "pqn.learning_rate=0.001,0.0003",
            "--vary",
            "pqn.end_e=0.05,0.1",
        ],
        768,
        False,
    ),
}


def run_cli(args: list[str]) -> None:
    """``fasttrain ARGS`` in this process; a failure raises with its output."""
    from click.testing import CliRunner

    from fasttrain.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"fasttrain {' '.join(args)}: exit {result.exit_code}\n{result.output}")


def run_dirs(out: Path) -> list[Path]:
    """The run directories under ``out``: itself, or a population's members (sorted)."""
    if (out / "checkpoint.pt").exists():
        return [out]
    return sorted(p for p in out.iterdir() if (p / "checkpoint.pt").exists())


def timeless_rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if not k.startswith(("time", "sps"))} for r in rows]


def networks(folder: Path) -> dict:
    """Every network's weights in ``folder``'s checkpoint, as NumPy arrays by dotted name."""
    from fasttrain.run import checkpoint

    state = checkpoint.load(folder)
    out = {}
    for key in ("model", "target_model"):
        for name, tensor in (state.get(key) or {}).items():
            out[f"{key}.{name}"] = tensor.detach().cpu().numpy()
    return out


def outcome(out: Path) -> dict:
    """What a case left: per run directory, its timeless rows and its weights' digests."""
    result = {}
    for folder in run_dirs(out):
        weights = networks(folder)
        digests = {
            n: hashlib.sha256(a.tobytes()).hexdigest()[:16] + f" {a.dtype} {list(a.shape)}"
            for n, a in sorted(weights.items())
        }
        result[folder.name] = {"rows": timeless_rows(folder), "weights": digests}
    return result


def run_case(name: str, scratch: Path) -> dict:
    """The case straight, and in two halves; what each left."""
    args, steps, _ = CASES[name]
    straight, halves = scratch / f"{name}-straight", scratch / f"{name}-halves"
    run_cli(["run", *args, "--steps", str(steps), "--out", str(straight)])
    run_cli(["run", *args, "--steps", str(steps // 2), "--out", str(halves)])
    run_cli(["run", "--resume", str(halves), "--steps", str(steps)])
    return {"straight": outcome(straight), "resumed": outcome(halves)}


def differences(expected: dict, found: dict, where: str = "") -> list[str]:
    """Where ``found`` departs from ``expected``: the first few paths and values."""
    if isinstance(expected, dict) and isinstance(found, dict):
        out = []
        for key in sorted(set(expected) | set(found)):
            if key not in found or key not in expected:
                out.append(f"{where}/{key}: {'missing' if key not in found else 'unexpected'}")
            else:
                out += differences(expected[key], found[key], f"{where}/{key}")
        return out
    if isinstance(expected, list) and isinstance(found, list) and len(expected) == len(found):
        return [
            d
            for i, (e, f) in enumerate(zip(expected, found, strict=True))
            for d in differences(e, f, f"{where}[{i}]")
        ]
    return [] if expected == found else [f"{where}: expected {expected!r}, found {found!r}"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("check", "record"):
        print(__doc__)
        return 2
    missing = {k: v for k, v in PINNED.items() if os.environ.get(k) != v}
    if missing:  # set before torch loads: start again with them
        os.execve(
            sys.executable,
            [sys.executable, "-m", "tests.reference", *argv],
            {**os.environ, **PINNED},
        )
    names = argv[1:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case {unknown[0]!r}; valid: {', '.join(CASES)}")
        return 2
    DATA.mkdir(parents=True, exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            found = run_case(name, Path(scratch))
            path = DATA / f"{name}.json"
            if argv[0] == "record":
                path.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
                print(f"recorded {path}")
                continue
            diffs = differences(json.loads(path.read_text()), found)
            print(f"{name}: {'same' if not diffs else 'DIFFERENT'}")
            for line in diffs[: int(os.environ.get("FASTTRAIN_REFERENCE_LINES", "8"))]:
                print(f"  {line}")
            failed += [name] if diffs else []
    print(f"{len(names) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

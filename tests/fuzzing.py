"""A seeded checkpoint fuzzer: hostile values inside well-formed, correctly checksummed files.

A checksum says a checkpoint is intact, not that it is sane (anyone can write a valid SHA-256).
So each case takes a tiny real checkpoint, changes ONE thing in it (an environment-state array,
a learner-state leaf or tensor, a header, identity or config field), writes it back through
``fasttrain.run.checkpoint.save`` (so the digest is valid) and hands it to every command that reads
checkpoints. Each reading must end in one of two ways:

- OK: exit 0, a correct run (and not for a value the reader had to refuse: a negative
  ``global_step`` continued from is a silent acceptance, a failure);
- REFUSED: a non-zero exit with exactly one ``Error: ...`` line on stderr.

Anything else fails: a signal (a crash), no end within ``TIMEOUT_S`` (a hang), a traceback, an
``IndexError`` from the bounds-checked kernels (``FASTTRAIN_CHECKED_KERNELS=1``: an out-of-bounds
access), several lines of error.

One server process per base checkpoint (``python -m tests.fuzzing BASE ...``) imports torch and
the kernels and trains the base once, then forks one child per (case, reader) that runs the CLI
in-process with a timeout: a case costs its own work, not an interpreter start. Numba uses its
``workqueue`` threading layer and one thread, torch one thread (GNU OpenMP is not fork-safe).
Reproduce one case with the command the failure table prints::

    python -m tests.fuzzing snake-ppo --seed 51 --case 'env.rng[1]=0' --reader resume -v
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from tests import fuzzpopulation
from tests.fuzzcases import READERS, Case, all_cases, sample

ALL_READERS = (*READERS, "new")  # "new": a new population (``tests/fuzzpopulation.py``)

SEED = 51
TIMEOUT_S = 20.0  # a hang: a reading takes under a second on a warm kernel cache (7 s at most seen)
MEMORY_GIB = 3  # address space a child may add to the server's: a claimed 1e9-wide net is refused
CHILD_ENV = {
    "FASTTRAIN_CHECKED_KERNELS": "1",  # IndexError instead of a silent out-of-bounds write
    "NUMBA_NUM_THREADS": "1",
    "NUMBA_THREADING_LAYER": "workqueue",  # fork-safe, where GNU OpenMP aborts the child
    "OMP_NUM_THREADS": "1",
    "OBJC_DISABLE_INITIALIZE_FORK_SAFETY": "YES",  # macOS: a forked child may use what it had
}
NUM_ENVS, NUM_STEPS = 4, 8
COMMON = (
    "model.hidden=16",
    "model.channels=4",
    "log.progress=false",
    "log.curves=false",
    "run.torch_threads=1",
    "run.numba_threads=1",
    "run.compile=off",
    "run.checkpoint_interval=1",
)


def _learner(game: str, algo: str, *extra: str) -> tuple:
    section = f"game.{game}.{algo}"
    sizes = [f"{section}.num_envs={NUM_ENVS}", f"{section}.num_steps={NUM_STEPS}"]
    if algo in ("ppo", "pqn"):
        sizes.append(f"{section}.num_minibatches=2")
    if algo == "dqn":
        sizes += [
            f"{section}.buffer_size=256",
            f"{section}.learning_starts=32",
            f"{section}.batch_size=16",
            f"{section}.train_frequency=1",
            f"{section}.target_network_frequency=64",
        ]
    return game, algo, (*sizes, *extra)


MINATAR = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
# name -> (game, learner, --set items): a tiny run of every game and every learner
BASES = {
    "snake-ppo": _learner("snake", "ppo", "game.snake.height=6", "game.snake.width=6"),
    "cartpole-ppo": _learner("cartpole", "ppo"),
    "arena-ppo": _learner(
        "arena", "ppo", "game.arena.num_snakes=2", "game.arena.max_bots=1", "game.arena.num_bots=1"
    ),
    **{f"minatar-{g}-ppo": _learner(f"minatar-{g}", "ppo") for g in MINATAR},
    "snake-ppo-overlap": _learner(
        "snake", "ppo", "game.snake.height=6", "game.snake.width=6", "ppo.overlap=true"
    ),
    "cartpole-ppo-gru": _learner(
        "cartpole", "ppo", "model.core=gru", "model.core_size=8", "ppo.bptt_horizon=8"
    ),
    "cartpole-pqn": _learner("cartpole", "pqn"),
    "minatar-asterix-pqn": _learner("minatar-asterix", "pqn"),
    "cartpole-dqn": _learner("cartpole", "dqn"),
    # populations of two members (``tests/fuzzpopulation.py``): read by their resume
    "cartpole-ppo-population": _learner("cartpole", "ppo"),
    "cartpole-pqn-population": _learner("cartpole", "pqn"),
}
POPULATION_SEEDS = "0-1"
ITERATIONS = 2  # of the base run; the resume trains one more


def base_steps(base: str) -> int:
    return ITERATIONS * NUM_ENVS * NUM_STEPS * (2 if BASES[base][0] == "arena" else 1)


def is_population(base: str) -> bool:
    return base.endswith("-population")


def command(base: str, reader: str, folder: Path, case_id: str = "") -> list[str]:
    """The CLI arguments of ``reader`` given the run directory ``folder``."""
    if reader == "new":  # a new population from hostile --seeds / --vary forms
        game, algo, sets = BASES[base]
        args = ["run", "--game", game, "--algo", algo, *fuzzpopulation.command_args(case_id, algo)]
        args += ["--steps", str(NUM_ENVS * NUM_STEPS), "--out", str(new_out(folder))]
        return args + [a for s in (*COMMON, *sets) for a in ("--set", s)]
    if reader == "inspect":
        return ["checkpoint", "inspect", str(folder)]
    if reader == "play":
        return ["play", "--checkpoint", str(folder), "--steps", "3"]
    if reader == "eval":
        return ["eval", "--run", str(folder), "--episodes", "1", "--num-envs", "2"]
    steps = base_steps(base) // ITERATIONS * (ITERATIONS + 1)
    return ["run", "--resume", str(folder), "--steps", str(steps)]


def new_out(folder: Path) -> Path:
    """Where a ``new`` reading's population goes: two folders down, so that a name that
    climbs out (``../../x``) lands inside the case's folder, where ``escaped`` sees it."""
    return folder / "a" / "b" / "pop"


def escaped(folder: Path) -> list[str]:
    """What a ``new`` reading wrote in its case's folder outside its ``--out``."""
    allowed = {"stdout.txt", "stderr.txt", "a", "a/b"}
    inside = new_out(folder)
    return [
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if str(path.relative_to(folder)) not in allowed
        and path != inside
        and inside not in path.parents
    ]


# ------------------------------------------------------------------------------- running


@dataclass
class Outcome:
    base: str
    case: str
    kind: str  # env | learner | tensor | header
    reader: str
    outcome: str  # OK | REFUSED | FAIL
    why: str  # the refusal's line, or what failed: crash, hang, traceback, oob, lines, silent
    detail: str  # the last lines of stderr (a traceback's end, the refusal)
    seconds: float


def classify(code: int | None, signum: int | None, err: str, out: str, must_refuse: bool):
    """(outcome, why, detail) of one reading: exit ``code`` or death by ``signum``."""
    lines = [line for line in err.splitlines() if line.strip()]
    notices = ("compiling ",)  # the compile notice a cold cache prints, then its seconds
    said = [line for line in lines if not line.startswith(notices)]
    tail = "\n".join(lines[-6:])
    if signum is not None:
        if signum == signal.SIGKILL and code == -1:
            return "FAIL", "hang", tail
        return "FAIL", f"crash ({signal.Signals(signum).name})", tail
    if "Traceback" in err or "Traceback" in out:
        raised = [ln for ln in lines if re.match(r"[\w.]+(Error|Exception|Warning)\b", ln)]
        last = raised[-1] if raised else lines[-1]
        if last.startswith("IndexError"):  # what a bounds-checked kernel raises
            return "FAIL", f"oob: {last[:160]}", tail
        return "FAIL", f"traceback: {last[:160]}", tail
    if code == 0:
        return ("FAIL", "silent", tail) if must_refuse else ("OK", "", tail)
    if len(said) == 1 and said[0].startswith("Error: "):
        return "REFUSED", said[0], tail
    return "FAIL", f"{len(said)} lines, exit {code}", tail


def run_child(args, folder: Path) -> tuple[int | None, int | None, str, str]:
    """``fasttrain ARGS`` in a forked child, stdout and stderr to files in ``folder``: (exit
    code, signal, stderr, stdout); a child past ``TIMEOUT_S`` is killed (signal 9, code -1)."""
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(args, out, err)
    deadline = time.monotonic() + TIMEOUT_S
    code = signum = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code, signum = -1, signal.SIGKILL
            break
        time.sleep(0.005)
    if code is None:
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
    return code, signum, read(err), read(out)


def _child(args, out: Path, err: Path) -> None:
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        import resource

        limit = _address_space() + MEMORY_GIB * 2**30
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):  # macOS may refuse to lower it: the run goes unlimited
            pass
        try:
            if callable(args):  # one of self_check's endings, run as a command
                import click

                click.command()(args).main([], standalone_mode=True)
            else:
                from fasttrain.cli import main

                main.main(args, prog_name="fasttrain", standalone_mode=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            code = 130
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 8 * 2**30  # no /proc (macOS): a generous guess


def train_base(base: str, folder: Path) -> Path:
    """The base run of ``base`` in ``folder`` (trained in this process: its kernels and
    networks are then compiled for every child)."""
    from fasttrain.cli import main

    game, algo, sets = BASES[base]
    out = folder / base
    args = ["run", "--game", game, "--algo", algo, "--steps", str(base_steps(base))]
    args += ["--out", str(out)] + [a for s in (*COMMON, *sets) for a in ("--set", s)]
    if is_population(base):
        args += ["--seeds", POPULATION_SEEDS]
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the run's log lines
    try:
        main.main(args, prog_name="fasttrain", standalone_mode=False)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
    return out


def write_case(base_dir: Path, state: dict, case: Case, folder: Path) -> Path:
    """A run directory like ``base_dir`` whose checkpoint holds ``state`` changed by ``case``,
    written by fasttrain's own writer (a valid checksum); for a population, its folder with
    member ``seed-1``'s checkpoint so changed, or the case's change to its files."""
    from fasttrain.run import checkpoint

    if (base_dir / "population.json").is_file():
        if case.kind == "command":
            folder.mkdir(parents=True)
            return folder
        shutil.copytree(base_dir, folder, ignore=shutil.ignore_patterns(".lock"))
        if case.kind == "file":
            case.apply(folder)
        else:
            write_case(base_dir / fuzzpopulation.MEMBER, state, case, folder / "member")
            os.replace(
                folder / "member" / checkpoint.FILENAME,
                folder / fuzzpopulation.MEMBER / checkpoint.FILENAME,
            )
            shutil.rmtree(folder / "member")
        return folder
    folder.mkdir(parents=True)
    for path in base_dir.iterdir():
        if path.is_file() and path.name != checkpoint.FILENAME:
            shutil.copy(path, folder / path.name)
    changed = copy.deepcopy(state)
    case.apply(changed)
    checkpoint.save(folder / checkpoint.FILENAME, changed)
    return folder


def serve(base: str, seed: int, work: Path, count: int | None, only=None, readers=ALL_READERS):
    """Train ``base``, then read each case (``count`` sampled, or those named in ``only``) with
    each of its readers in a forked child: a list of Outcome."""
    from fasttrain.run import checkpoint

    base_dir = train_base(base, work)
    if is_population(base):
        state = checkpoint.read_state(base_dir / fuzzpopulation.MEMBER)
        cases = fuzzpopulation.all_population_cases(state, seed)
    else:
        state = checkpoint.read_state(base_dir)
        cases = all_cases(state, seed)
    if only:
        cases = [c for c in cases if c.id in only]
    elif count is not None:
        cases = sample(cases, seed, count)
    results = []
    for n, case in enumerate(cases):
        folder = write_case(base_dir, state, case, work / "cases" / base / str(n))
        for reader in (r for r in ALL_READERS if r in case.readers and r in readers):
            started = time.perf_counter()
            args = command(base, reader, folder, case.id)
            code, signum, err, out = run_child(args, folder)
            verdict = classify(code, signum, err, out, reader in case.refuse)
            wrote = escaped(folder) if reader == "new" else []
            if wrote:  # a name that left its --out: data loss, whatever the exit
                verdict = ("FAIL", f"escaped: wrote {wrote[0]}", verdict[2])
            seconds = time.perf_counter() - started
            results.append(Outcome(base, case.id, case.kind, reader, *verdict, seconds))
    return results


def self_check(work: Path) -> None:
    """The fuzzer tells each ending apart: children that crash, hang, raise, refuse, run."""
    import click

    global TIMEOUT_S
    endings = [  # (outcome, why, must refuse, the child's command)
        ("FAIL", "crash (SIGSEGV)", False, lambda: os.kill(os.getpid(), signal.SIGSEGV)),
        ("FAIL", "hang", False, lambda: time.sleep(60)),  # past a timeout of half a second
        ("FAIL", "oob: IndexError: list index out of range", False, lambda: [][9]),
        ("FAIL", "traceback: KeyError: 'x'", False, lambda: {}["x"]),
        ("REFUSED", "Error: refused", False, lambda: _raise(click.ClickException("refused"))),
        ("FAIL", "2 lines, exit 1", False, lambda: sys.exit(print("a\nb", file=sys.stderr) or 1)),
        ("FAIL", "silent", True, lambda: None),
        ("OK", "", False, lambda: None),
    ]
    timeout, TIMEOUT_S = TIMEOUT_S, 0.5
    try:
        for n, (outcome, why, refuse, ending) in enumerate(endings):
            folder = work / "self-check" / str(n)
            folder.mkdir(parents=True)
            code, signum, err, out = run_child(ending, folder)
            got = classify(code, signum, err, out, refuse)[:2]
            assert got == (outcome, why), (outcome, why, got, err)
    finally:
        TIMEOUT_S = timeout


def _raise(exc):
    raise exc


def reproduce(outcome: dict, seed: int) -> str:
    """The one command that reads this case again and shows all it printed."""
    return (
        f"python -m tests.fuzzing {outcome['base']} --seed {seed} "
        f"--case '{outcome['case']}' --reader {outcome['reader']} -v"
    )


def table(outcomes: list[dict], seed: int) -> str:
    """The failures, grouped by what failed, each with the command that reproduces it."""
    failed = [o for o in outcomes if o["outcome"] == "FAIL"]
    groups: dict[str, list] = {}
    for o in failed:
        groups.setdefault(o["why"].split(":")[0], []).append(o)
    lines = [f"checkpoint fuzz (seed {seed}): {len(failed)} of {len(outcomes)} readings failed"]
    for why, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"-- {why}: {len(group)}")
        for o in group:
            lines.append(f"  {o['base']:<20} {o['reader']:<7} {o['case']:<44} {o['why'][:90]}")
            lines.append(f"      {reproduce(o, seed)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__)
    parser.add_argument("bases", nargs="+", choices=list(BASES), metavar="BASE")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--count", type=int, default=None, help="cases per base (default: all)")
    parser.add_argument("--case", action="append", help="only this case id (repeatable)")
    parser.add_argument("--reader", action="append", choices=ALL_READERS)
    parser.add_argument("--work", type=Path, default=None, help="folder for the runs")
    parser.add_argument("--json", type=Path, default=None, help="write the outcomes here")
    parser.add_argument("--self-check", action="store_true", help="check the verdicts first")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each reading's end")
    args = parser.parse_args(argv)
    missing = {k: v for k, v in CHILD_ENV.items() if os.environ.get(k) != v}
    if missing:  # the settings must be there before numba and torch are imported: restart
        os.execve(
            sys.executable,
            [sys.executable, "-m", "tests.fuzzing", *sys.argv[1:]],
            {**os.environ, **missing},
        )
    import tempfile

    import torch

    torch.set_num_threads(1)  # before any op: no thread pool for a child to inherit
    work = args.work or Path(tempfile.mkdtemp(prefix="fasttrain-fuzz-"))
    if args.self_check:
        self_check(work)
    rows, seconds = [], {}
    for base in args.bases:
        started = time.perf_counter()
        readers = args.reader or ALL_READERS
        outcomes = serve(base, args.seed, work, args.count, args.case, readers)
        rows += [asdict(o) for o in outcomes]
        seconds[base] = time.perf_counter() - started
        if args.json:  # after each base: what was read survives a stop in the next
            args.json.write_text(json.dumps({"seconds": seconds, "rows": rows}))
    for o in rows if args.verbose else []:
        print(f"{o['outcome']:<8} {o['reader']:<7} {o['case']} {o['why']}\n{o['detail']}\n")
    print(table(rows, args.seed))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(o["outcome"] == "FAIL" for o in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

"""``fasttrain run --seeds 0-3``: one process trains one member per seed (and per variant of
``--vary``) with a learner that trains populations (``learners/population.py``); this module is
what is only about a population's folder, its plan and its lines: ``fasttrain.run.runner`` trains it
through the one loop every run takes.

The run directory holds ``population.json`` (the seeds, their member directories and, at the
end, each member's final row with the median and the worst) and one member directory per seed,
``seed-S/``, each a normal run directory: ``config.toml`` (the run's config with ``run.seed =
S``), ``metrics.csv``, ``checkpoint.pt`` in the solo run's form, ``summary.json``,
``curves.png``. So ``fasttrain eval``, ``play`` and ``plot`` read a member directory, and
``fasttrain run --resume OUT/seed-S`` continues that member alone as a solo run, while
``fasttrain run --resume OUT`` continues the whole population from its members' checkpoints.
A member stopped by its NaN guard stops alone: its last good checkpoint stays, the others go on.
The terminal gets one line per ``log.interval_s`` for the whole population.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import stat
import statistics
from pathlib import Path

from fasttrain.config.read import file_kind
from fasttrain.config.resolve import Config
from fasttrain.errors import ConfigError
from fasttrain.learners import MAX_MEMBERS
from fasttrain.run.rundir import write_atomic

# torch-free at import (``fasttrain run`` refuses bad input before torch loads)

POPULATION_FILE = "population.json"
SEEDS_FORM = "comma-separated seeds and ranges, e.g. 0,1,2 or 0-7"


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds`` as seeds: ``"0,1,2"``, ``"0-7"``, ``"0-3,10"``; one line otherwise. Ranges
    are counted before any list is built: ``0-100000000`` is refused at once."""
    parts = [part.strip() for part in str(text).split(",")]
    ranges = []
    for part in parts:
        match = SEED_PART.fullmatch(part)
        if match is None:
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range; {SEEDS_FORM}")
        first = int(match[1])
        last = first if match[2] is None else int(match[2])
        if last < first:
            raise ConfigError(f"--seeds {text!r}: {part!r} runs backwards; {SEEDS_FORM}")
        if last >= 2**64:
            raise ConfigError(f"--seeds {text!r}: {last} is not a seed in [0, 2**64)")
        ranges.append(range(first, last + 1))
    count = sum(len(r) for r in ranges)
    if count > MAX_MEMBERS:
        raise ConfigError(f"--seeds {text!r}: {count:,} members; at most {MAX_MEMBERS}")
    seeds = [seed for r in ranges for seed in r]
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ConfigError(f"--seeds {text!r}: seed {twice[0]} twice; each member its own seed")
    return tuple(seeds)


SEED_PART = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")  # ASCII digits: no "٣", no "+1"
# a member's folder: a plain name inside its population's folder (no "/", "\\", "..", spaces)
MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
WORD = re.compile(r"[A-Za-z0-9._+-]{1,32}")  # a --vary value that is a word (a string setting)


def plain_name(name) -> bool:
    """True for a member folder's name: letters, digits, ``.``, ``_``, ``+``, ``-``, first a
    letter or digit (never ``..``, a path, a hidden file or a Windows device path)."""
    return isinstance(name, str) and MEMBER_NAME.fullmatch(name) is not None


def value_text(value) -> str | None:
    """A ``--vary`` value (parsed as ``--set`` parses it) as the text of its member's folder
    and of its ``--set`` item: one canonical text per value; None for what no name can hold."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str) and WORD.fullmatch(value):
        return value
    return None


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of a population: its directory's name, its seed and the ``--set`` items of
    its variant (``--vary``), its config where known."""

    name: str
    seed: int
    sets: tuple[str, ...] = ()
    config: Config | None = dataclasses.field(default=None, compare=False)


def parse_vary(items, algo: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """``--vary KEY=V1,V2`` items as ``(key, values)``: each value as ``--set`` parses it, in
    its canonical text (``value_text``: what names its members' folders and goes into their
    ``--set`` items, never the raw text); the key one of the settings members may vary (each
    learner's registration: ``Learner.variable``; ``algo``: the run's learner's), one line
    otherwise."""
    from fasttrain.learners import LEARNERS

    variable = {name: one.variable for name, one in LEARNERS.items() if one.variable}
    if algo in variable:
        variable = {algo: variable[algo]}
    allowed = ", ".join(f"{name}.{k}" for name, keys in variable.items() for k in keys)
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        key, eq, values = str(item).partition("=")
        key = key.strip()
        section, _, name = key.rpartition(".")
        if not eq or name not in variable.get(section, ()):
            raise ConfigError(f"--vary {item!r}: vary one of {allowed} as KEY=V1,V2,...")
        texts = tuple(_vary_value(item, raw) for raw in values.split(","))
        if len(set(texts)) != len(texts):
            raise ConfigError(f"--vary {item!r}: give distinct values, comma-separated")
        if any(k == key for k, _ in out):
            raise ConfigError(f"--vary {key} given twice; list its values once")
        out.append((key, texts))
    return out


def _vary_value(item: str, raw: str) -> str:
    """One ``--vary`` value's canonical text (a number, true/false or a word); one line if it
    is none of them (a comment, a path, a table: nothing a folder's name may hold)."""
    from fasttrain.config.read import parse_value

    raw = raw.strip()
    value = parse_value(raw) if raw.isprintable() and raw else None
    text = value_text(value)
    if text is None:
        raise ConfigError(
            f"--vary {item!r}: {raw!r} is not a value a member's folder can be named by; give "
            "numbers, true/false or words (letters, digits, . _ + -), comma-separated"
        )
    return text if not isinstance(value, str) else json.dumps(value)


def plan_members(seeds, vary=()) -> list[Member]:
    """Every seed with every combination of the ``vary`` values (a grid), seed first; a plain
    population's members are named ``seed-S``, a variant's ``seed-S-<name>-<value>...``, from
    the parsed values (``parse_vary``). The count is checked before the grid is built."""
    import itertools

    count = len(seeds) * math.prod(len(values) for _, values in vary)
    if count > MAX_MEMBERS:
        raise ConfigError(f"{count:,} members (seeds x variants): at most {MAX_MEMBERS}")
    combos = list(itertools.product(*[[(k, v) for v in values] for k, values in vary]))
    members = []
    for seed in seeds:
        for combo in combos:
            sets = tuple(f"{k}={v}" for k, v in combo)
            label = "".join(f"-{k.rpartition('.')[2]}-{v.strip(chr(34))}" for k, v in combo)
            members.append(Member(f"seed-{seed}{label}", seed, sets))
    for m in members:
        if not plain_name(m.name):
            raise ConfigError(f"member {m.name!r}: a name of at most 128 letters, digits, . _ + -")
    return members


def member_dir(out: Path, member) -> Path:
    return Path(out) / (member.name if isinstance(member, Member) else f"seed-{member}")


def is_population(folder) -> bool:
    """True for a population's run directory (``population.json``)."""
    return (Path(folder) / POPULATION_FILE).is_file()


MAX_FILE_BYTES = 4 << 20  # population.json of 256 members with their final rows: ~0.3 MiB


def saved_members(folder) -> list[Member]:
    """The members a population's run directory was made with, ``population.json`` checked as
    any state file (a regular file of bounded size and depth, its types, the member cap, plain
    member names, each once); one line where anything is wrong."""
    path = Path(folder) / POPULATION_FILE
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path} is {file_kind(info.st_mode)}, not a population's file")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{path} is {info.st_size:,} bytes; at most {MAX_FILE_BYTES:,}")
        entries = json.loads(path.read_bytes())["members"]
    except RecursionError:
        raise ConfigError(f"{path} nests its values too deep for a population's file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a population's file: {str(exc)[:200]}") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: 'members' must be a list of members")
    if len(entries) > MAX_MEMBERS:
        raise ConfigError(f"{path}: {len(entries):,} members; at most {MAX_MEMBERS}")
    members = [_saved_member(path, n, entry) for n, entry in enumerate(entries)]
    if len({m.name for m in members}) != len(members):
        raise ConfigError(f"{path}: the members must be named, each once")
    return members


def _saved_member(path: Path, n: int, entry) -> Member:
    """Member ``n`` of ``population.json``, each field's type and value checked."""
    where = f"{path}: member {n}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} is {type(entry).__name__}; expected a table")
    name, seed, sets = entry.get("dir"), entry.get("seed"), entry.get("sets", [])
    if not plain_name(name):
        raise ConfigError(f"{where}: {str(name)[:80]!r} is not a member directory's name")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ConfigError(f"{where}: seed {str(seed)[:40]} is not a seed in [0, 2**64)")
    if not isinstance(sets, list) or not all(isinstance(s, str) and "=" in s for s in sets):
        raise ConfigError(f"{where}: 'sets' must be a list of KEY=VALUE settings")
    return Member(name, seed, tuple(sets))


def member_error(out, name: str, exc: ConfigError) -> ConfigError:
    """``exc``'s one line, its member named: ``population OUT, member NAME: ...``."""
    return type(exc)(f"population {out}, member {name}: {exc}")


@contextlib.contextmanager
def member_errors(out, name: str | None):
    """A member's one-line refusals named (``member_error``); a solo run's (``name`` None) as
    they are."""
    try:
        yield
    except ConfigError as exc:
        if name is None:
            raise
        raise member_error(out, name, exc) from None


def member_folder(out: Path, member: Member, must_exist: bool) -> Path:
    """``out/NAME``: a plain folder inside the population's folder, never a link (a write
    through one would land in another run); one line otherwise."""
    folder = member_dir(out, member)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        if must_exist:
            raise ConfigError(f"{folder} is missing") from None
        return folder
    except OSError as exc:
        raise ConfigError(f"cannot read {folder}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):  # lstat: a link to a folder is a link
        raise ConfigError(f"{folder} is {file_kind(info.st_mode)}; a member's folder is a folder")
    return folder


def members(plan, locks: list) -> list[tuple]:
    """``(folder, config, state, member, newest)`` of each member of ``plan``'s population
    (``runner.Plan``): on resume, read from its folder (``population.json``; each member's
    folder locked (appended to ``locks``), its config and state from the checkpoint of the
    newest step every member holds, with the plan's settings); otherwise the members given,
    into a folder that holds no run yet (``newest``: whether the state is the member's
    ``checkpoint.pt``, not its previous one). Each refusal names its member."""
    from fasttrain.run import checkpoint
    from fasttrain.run.rundir import RunLock

    out = plan.out
    if not plan.resuming:
        if is_population(out) or (out / checkpoint.FILENAME).exists():
            raise ConfigError(
                f"{out} already holds a run; continue it with --resume {out} or choose "
                "another --out"
            )
        for m in plan.members:
            with member_errors(out, m.name):
                member_folder(out, m, must_exist=False)
        return [(member_dir(out, m), m.config, None, m, True) for m in plan.members]
    saved = saved_members(out)
    for m in saved:
        with member_errors(out, m.name):
            locks.append(RunLock(member_folder(out, m, must_exist=True)))
            locks[-1].acquire()
    chosen = newest_set(out, saved, plan.echo)
    found = []
    for m, path in zip(saved, chosen, strict=True):
        with member_errors(out, m.name):
            state = checkpoint.load(path)
            config = plan.member_config(checkpoint.config_table(path, state))
            check_member(m, checkpoint.saved_config(path, state), plan.config.run.algo)
        member = dataclasses.replace(m, config=config)
        found.append((path.parent, config, state, member, path.name == checkpoint.FILENAME))
    return found


def newest_set(out: Path, saved: list[Member], echo) -> list[Path]:
    """Each member's checkpoint file at the newest step that every member's checkpoint holds.

    A population writes its members' checkpoints one after another, each keeping its previous
    one as ``checkpoint.prev.pt`` (``rundir.keep_previous``): a kill -9 or a second signal
    between two members' writes leaves some at the new step and the others at the previous
    one, and every member still holds the previous step. So the population continues, whole
    and exactly, from there (a line says which step when a newer one is passed over)."""
    from fasttrain.learners import savedstate
    from fasttrain.run import checkpoint

    steps = []
    for m in saved:
        folder, held = member_dir(out, m), {}
        with member_errors(out, m.name):
            for path in (folder / checkpoint.FILENAME, folder / checkpoint.PREVIOUS):
                if path.is_file() or path.name == checkpoint.FILENAME:
                    skeleton = checkpoint.read_state(path, arrays=False)
                    savedstate.table(skeleton, "state")  # a step none could write: refused
                    savedstate.check_common(skeleton, resuming=True)
                    held.setdefault(skeleton["global_step"], path)
        steps.append(held)
    common = set(steps[0]).intersection(*steps[1:])
    if not common:
        newest = ", ".join(f"{m.name} {max(h):,}" for m, h in zip(saved, steps, strict=True))
        raise ConfigError(
            f"population {out}: its members' checkpoints share no step ({newest}); a member "
            "that stopped alone (its NaN guard) continues alone: --resume OUT/MEMBER"
        )
    step = max(common)
    if any(max(held) > step for held in steps):
        echo(
            f"population {out}: continuing every member from step {step:,}, the newest step "
            "every member's checkpoint holds (a stop came between two members' writes)"
        )
    return [held[step] for held in steps]


def check_member(member: Member, saved: Config, algo: str) -> None:
    """Refuse a member's checkpoint that belongs to another member or run: its learner must be
    the population's (``algo``), its saved seed and variant the ones ``population.json`` gives
    that member."""
    from fasttrain.config.read import parse_value

    if saved.run.algo != algo:
        raise ConfigError(
            f"its checkpoint was written by learner {saved.run.algo!r} and this population "
            f"trains {algo!r} (a checkpoint of another run)"
        )
    if saved.run.seed != member.seed:
        raise ConfigError(
            f"its checkpoint was written with run.seed = {saved.run.seed}, {POPULATION_FILE} "
            f"gives this member seed {member.seed} (a checkpoint of another member or run)"
        )
    for item in member.sets:
        key, _, text = item.partition("=")
        section, _, name = key.strip().rpartition(".")
        wanted = parse_value(text)
        ours = getattr(saved.learner, name, None) if section == saved.run.algo else None
        if ours is None or ours != wanted:
            raise ConfigError(
                f"its checkpoint was written with {key.strip()} = {ours!r}, {POPULATION_FILE} "
                f"gives this member {item!r} (a checkpoint of another member or run)"
            )


def first_line(config: Config, members: list, trainer, out: Path) -> str:
    """A population's first line: its members, the game and learner, its sizes, its folder."""
    seeds = sorted({m.seed for m in members})
    variants = len(members) // max(len(seeds), 1)
    shape = f"seeds {', '.join(map(str, seeds))}"
    shape += f"; {variants} variants each" if variants > 1 else ""
    return (
        f"fasttrain: population of {len(members)} ({shape}) on {config.game.name} | "
        f"{config.run.algo} | {trainer.n} envs x {trainer.args.num_steps} steps each | "
        f"{trainer.num_iterations * trainer.batch_size:,} steps per member | run dir {out}"
    )


def done_line(result: dict, out: Path) -> str:
    """A population's last line: its members' steps, the median and worst final score."""
    rows = result["member_rows"]
    return (
        f"done: {len(rows)} members x {rows[0]['global_step']:,} steps | score median "
        f"{_fmt(result['median_score'])}, worst {_fmt(result['worst_score'])} | {out}"
    )


def _fmt(value) -> str:
    return "--" if value is None or not math.isfinite(value) else f"{value:.2f}"


def progress_line(step: int, steps: int, members: int, live, scores, elapsed: float) -> str:
    """The population's log line: steps, steps/s over every member (``steps`` each since the
    start), the spread of the scores the live members' last metrics rows showed."""
    scores = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    sps = steps * members / max(elapsed, 1e-9)
    spread = "score --"
    if scores:
        median = statistics.median(scores)
        spread = f"score median {median:.2f} (min {min(scores):.2f}, max {max(scores):.2f})"
    stopped = members - len(live)
    return f"step {step:>12,} | {sps:>12,.0f} SPS (all members) | {spread}" + (
        f" | {stopped} stopped" if stopped else ""
    )


def write_population(out: Path, members, summaries) -> dict:
    """``population.json``: the seeds and members (directory, seed, variant); at the end each
    member's final row, and the median and worst final score."""
    result: dict = {
        "seeds": sorted({m.seed for m in members}),
        "members": [{"dir": m.name, "seed": m.seed, "sets": list(m.sets)} for m in members],
    }
    if summaries is not None:
        scores = [s["score"] for s in summaries if isinstance(s.get("score"), (int, float))]
        result["median_score"] = statistics.median(scores) if scores else None
        result["worst_score"] = min(scores) if scores else None
        result["member_rows"] = summaries
    write_atomic(Path(out) / POPULATION_FILE, json.dumps(result, indent=2) + "\n")
    return result

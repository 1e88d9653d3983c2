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

import dataclasses
import json
import math
import statistics
from pathlib import Path

from fasttrain.config.resolve import Config
from fasttrain.errors import ConfigError
from fasttrain.learners import MAX_MEMBERS
from fasttrain.run.rundir import write_atomic

# torch-free at import (``fasttrain run`` refuses bad input before torch loads)

POPULATION_FILE = "population.json"
SEEDS_FORM = "comma-separated seeds and ranges, e.g. 0,1,2 or 0-7"


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds`` as seeds: ``"0,1,2"``, ``"0-7"``, ``"0-3,10"``; one line otherwise."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            if dash:
                first, last = int(low), int(high)
                if last < first:
                    raise ValueError
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ConfigError(
                f"--seeds {text!r}: {part!r} is not a seed or a range; {SEEDS_FORM}"
            ) from None
        if len(seeds) > MAX_MEMBERS:
            raise ConfigError(f"--seeds {text!r}: more than {MAX_MEMBERS} members")
    for seed in seeds:
        if not 0 <= seed < 2**64:
            raise ConfigError(f"--seeds {text!r}: {seed} is not a seed in [0, 2**64)")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ConfigError(f"--seeds {text!r}: seed {twice[0]} twice; each member its own seed")
    return tuple(seeds)


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of a population: its directory's name, its seed and the ``--set`` items of
    its variant (``--vary``), its config where known."""

    name: str
    seed: int
    sets: tuple[str, ...] = ()
    config: Config | None = dataclasses.field(default=None, compare=False)


def parse_vary(items, algo: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """``--vary KEY=V1,V2`` items as ``(key, values)``; the key one of the settings members may
    vary (each learner's registration: ``Learner.variable``; ``algo``: the run's learner's),
    one line otherwise."""
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
        parts = tuple(v.strip() for v in values.split(","))
        if not all(parts) or len(set(parts)) != len(parts):
            raise ConfigError(f"--vary {item!r}: give distinct values, comma-separated")
        if any(k == key for k, _ in out):
            raise ConfigError(f"--vary {key} given twice; list its values once")
        out.append((key, parts))
    return out


def plan_members(seeds, vary=()) -> list[Member]:
    """Every seed with every combination of the ``vary`` values (a grid), seed first; a plain
    population's members are named ``seed-S``, a variant's ``seed-S-<name>-<value>...``."""
    import itertools

    combos = list(itertools.product(*[[(k, v) for v in values] for k, values in vary]))
    members = []
    for seed in seeds:
        for combo in combos:
            sets = tuple(f"{k}={v}" for k, v in combo)
            label = "".join(f"-{k.rpartition('.')[2]}-{v}" for k, v in combo)
            members.append(Member(f"seed-{seed}{label}", seed, sets))
    if len(members) > MAX_MEMBERS:
        raise ConfigError(f"{len(members)} members (seeds x variants): at most {MAX_MEMBERS}")
    return members


def member_dir(out: Path, member) -> Path:
    return Path(out) / (member.name if isinstance(member, Member) else f"seed-{member}")


def is_population(folder) -> bool:
    """True for a population's run directory (``population.json``)."""
    return (Path(folder) / POPULATION_FILE).is_file()


def saved_members(folder) -> list[Member]:
    """The members a population's run directory was made with; one line where unreadable."""
    path = Path(folder) / POPULATION_FILE
    try:
        entries = json.loads(path.read_text())["members"]
        members = [
            Member(str(e["dir"]), int(e["seed"]), tuple(map(str, e["sets"]))) for e in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a population's file: {exc}") from None
    for m in members:
        if not m.name or "/" in m.name or "\\" in m.name or m.name.startswith("."):
            raise ConfigError(f"{path}: {m.name!r} is not a member directory's name")
    if not members or len({m.name for m in members}) != len(members):
        raise ConfigError(f"{path}: the members must be named, each once")
    for m in members:
        if not 0 <= m.seed < 2**64:
            raise ConfigError(f"{path}: {m.seed} is not a seed in [0, 2**64)")
    return members


def members(plan) -> list[tuple]:
    """``(folder, config, state, member)`` of each member of ``plan``'s population
    (``runner.Plan``): on resume, read from its folder (``population.json``; each member's
    config and state from its checkpoint, with the plan's total steps); otherwise the members
    given, into a folder that holds no run yet."""
    from fasttrain.run import checkpoint

    out = plan.out
    if not plan.resuming:
        if is_population(out) or (out / checkpoint.FILENAME).exists():
            raise ConfigError(
                f"{out} already holds a run; continue it with --resume {out} or choose "
                "another --out"
            )
        return [(member_dir(out, m), m.config, None, m) for m in plan.members]
    found, steps = [], plan.config.learner.total_timesteps
    for m in saved_members(out):
        folder = member_dir(out, m)
        state = checkpoint.load(folder)
        saved = checkpoint.saved_config(folder, state)
        if saved.learner.total_timesteps != steps:
            saved = saved.with_learner("--steps", total_timesteps=steps)
        found.append((folder, saved, state, dataclasses.replace(m, config=saved)))
    return found


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

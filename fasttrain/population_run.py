"""``fasttrain run --seeds 0-3``: one process trains one member per seed (issue 53), with PPO
(``learners/ppo_population.py``) or PQN (``learners/pqn_population.py``).

The run directory holds ``population.json`` (the seeds, their member directories and, at the
end, each member's final row with the median and the worst) and one member directory per seed,
``seed-S/``, each a normal run directory: ``config.toml`` (the run's config with ``run.seed =
S``), ``metrics.csv``, ``checkpoint.pt`` in the solo run's form, ``summary.json``,
``curves.png``. So ``fasttrain eval``, ``play`` and ``plot`` read a member directory, and
``fasttrain run --resume OUT/seed-S`` continues that member alone as a solo run, while
``fasttrain run --resume OUT`` continues the whole population from its members' checkpoints.

Each member gets the solo run's parts (metrics rows, its NaN guard, its checkpoints) through
``MemberView``, the face of a solo trainer the parts read. A member stopped by its NaN guard
stops alone: its last good checkpoint stays, the others go on. The terminal gets one line per
``log.interval_s`` for the whole population.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

from fasttrain.config import Config
from fasttrain.configfile import CONFIG_HEADER, to_toml
from fasttrain.errors import ConfigError, RunError
from fasttrain.ranks import SINGLE
from fasttrain.rundir import RunLock, check_writable, write_atomic

# torch-free at import (``fasttrain run`` refuses bad input before torch loads): checkpoint,
# parts and the trainer are imported where a population runs

POPULATION_FILE = "population.json"
MAX_MEMBERS = 256
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
            raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or a range; "
                              f"{SEEDS_FORM}") from None  # fmt: skip
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


def parse_vary(items) -> list[tuple[str, tuple[str, ...]]]:
    """``--vary KEY=V1,V2`` items as ``(key, values)``; the key one of the settings members may
    vary (``POPULATION_VARIABLE`` of ``learners/ppo_config.py`` and ``pqn_config.py``), one
    line otherwise."""
    from fasttrain.learners import ppo_config, pqn_config

    variable = {"ppo": ppo_config.POPULATION_VARIABLE, "pqn": pqn_config.POPULATION_VARIABLE}
    allowed = ", ".join(f"{algo}.{k}" for algo, keys in variable.items() for k in keys)
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
        members = [Member(str(e["dir"]), int(e["seed"]), tuple(map(str, e["sets"])))
                   for e in entries]  # fmt: skip
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


class _Env:
    """Member ``k``'s environments as the parts read them: sizes, and its episode stats."""

    def __init__(self, population, k: int):
        env = population.env
        self.num_envs, self.num_agents, self.obs_shape = population.n, 1, env.obs_shape
        self.sums = {"return": 0.0, "length": 0.0, "score": 0.0, "episodes": 0}

    def add(self, stats: dict) -> None:
        """An iteration's means of this member's finished episodes, kept as sums."""
        if stats:
            count = stats["episodes"]
            for name in ("return", "length", "score"):
                self.sums[name] += stats[name] * count
            self.sums["episodes"] += count

    def stats(self) -> dict:
        """``VecEnv.stats`` of this member: means since the last call, then clear."""
        count = self.sums["episodes"]
        if count == 0:
            return {}
        out = {n: self.sums[n] / count for n in ("return", "length", "score")}
        out["episodes"] = count
        self.sums = {"return": 0.0, "length": 0.0, "score": 0.0, "episodes": 0}
        return out


@dataclasses.dataclass
class _Context:
    updates: int = 0
    comm_s: float = 0.0


class MemberView:
    """Member ``k`` of a ``PopulationTrainer`` as the runner's parts see a solo trainer."""

    def __init__(self, population, k: int, config: Config):
        self.population, self.k, self.config = population, k, config
        self.args = config.learner
        self.env = _Env(population, k)
        self.ctx = _Context()
        self.timers = population.timers
        self.device = population.device
        self.num_iterations = population.num_iterations
        self.steps_per_iteration = population.batch_size
        self.precision = "bf16" if population.amp_dtype is not None else "fp32"
        self.env_state: dict | None = None  # the env buffers read once per save, shared

    @property
    def global_step(self) -> int:
        return self.population.global_step

    @property
    def iteration(self) -> int:
        return self.population.iteration

    @property
    def learning_rate(self) -> float:
        return float(self.population.optimizer.lrs[self.k])

    def state_dict(self) -> dict:
        return self.population.member_state(self.k, self.env_state)


LEARNERS = ("ppo", "pqn")  # the learners that train populations


def population_trainer(config):
    """The population trainer class of ``config``'s learner (``learners/ppo_population.py``,
    ``learners/pqn_population.py``); one line for a learner without one."""
    if config.run.algo == "ppo":
        from fasttrain.learners.ppo_population import PopulationTrainer

        return PopulationTrainer
    if config.run.algo == "pqn":
        from fasttrain.learners.pqn_population import PQNPopulationTrainer

        return PQNPopulationTrainer
    raise ConfigError(
        f"a population trains {' or '.join(LEARNERS)}, not run.algo = {config.run.algo!r}"
    )


def population_problem(config) -> str | None:
    """None where ``config`` can train as a population, else why not (one line)."""
    try:
        return population_trainer(config).problem(config)
    except ConfigError as exc:
        return str(exc)


def run_population(config: Config, members, out=None, resume=None, echo=print, on_row=None) -> dict:
    """Train ``members`` (``Member``s with their configs) into the population directory
    ``out``, or continue the population in ``resume`` (its members read from its
    ``population.json``, their configs from their checkpoints, with ``config``'s total steps);
    returns the population's summary. ``on_row(row)`` sees every member's metrics rows, as
    ``runner.run``'s (a list: member ``k``'s rows go to ``on_row[k]``): a true answer ends that
    member there, as if it had finished (its checkpoint, its summary with ``stopped_early``),
    and the others go on; an exception it raises ends the population."""
    from fasttrain import checkpoint, runner

    trainer_class = population_trainer(config)
    problem = trainer_class.problem(config)
    if problem:
        raise ConfigError(problem)
    resuming = resume is not None
    out = Path(resume if resuming else out or runner.default_out(config))
    members = saved_members(out) if resuming else list(members)
    check_writable(out)
    lock = RunLock(out)
    if out.exists():
        lock.acquire()  # a live population is refused before any work
    try:
        if not resuming and (is_population(out) or (out / checkpoint.FILENAME).exists()):
            raise ConfigError(
                f"{out} already holds a run; continue it with --resume {out} or choose "
                "another --out"
            )
        states = None
        if resuming:
            states, resumed = [], []
            for m in members:
                state = checkpoint.load(member_dir(out, m))
                saved = checkpoint.saved_config(member_dir(out, m), state)
                steps = config.learner.total_timesteps
                if saved.learner.total_timesteps != steps:
                    saved = saved.with_learner("--steps", total_timesteps=steps)
                checkpoint.check_identity(state, saved, world=1)
                states.append(state)
                resumed.append(dataclasses.replace(m, config=saved))
            members = resumed
        seeds, configs = [m.seed for m in members], [m.config for m in members]
        trainer = trainer_class(config, seeds, configs)
        if states is not None:
            trainer.load_members(states)
        lock.acquire()  # creates the folder: every check has passed
        return _train(config, members, trainer, out, states, echo, runner, on_row)
    finally:
        lock.release()


def _train(config, members, trainer, out: Path, states, echo, runner, on_row=None) -> dict:
    """The population's loop: an iteration, then each live member's parts at its boundary."""
    from fasttrain.parts import Boundary

    quiet = dataclasses.replace(config.log, progress=False)
    views, member_parts = [], []
    for k, m in enumerate(members):
        folder = member_dir(out, m)
        folder.mkdir(exist_ok=True)
        write_atomic(folder / "config.toml", to_toml(m.config, CONFIG_HEADER))
        view = MemberView(trainer, k, m.config)
        state = states[k] if states is not None else None
        parts_config = dataclasses.replace(m.config, log=quiet)
        mine = on_row[k] if isinstance(on_row, (list, tuple)) else on_row
        member_parts.append(
            runner._parts(parts_config, view, folder, state, None, _silent, mine, SINGLE)
        )
        views.append(view)
    _write_population(out, members, None)
    seeds = sorted({m.seed for m in members})
    variants = len(members) // max(len(seeds), 1)
    shape = f"seeds {', '.join(map(str, seeds))}"
    shape += f"; {variants} variants each" if variants > 1 else ""
    echo(
        f"fasttrain: population of {len(members)} ({shape}) on "
        f"{config.game.name} | {config.run.algo} | {trainer.n} envs x {trainer.args.num_steps} "
        "steps each | "
        f"{trainer.num_iterations * trainer.batch_size:,} steps per member | run dir {out}"
    )
    # one clock for the population: every member's rows (and so a budget on them) read the
    # same training seconds at a boundary, resumed from the first member's
    start_clock = member_parts[0].clock
    for parts in member_parts[1:]:
        parts.clock.start, parts.clock.offset = start_clock.start, start_clock.offset
    live, diverged = set(range(len(members))), set()
    first_step, stopped_by = trainer.global_step, None
    ended: dict[int, dict] = {}  # the summaries of members that ended before the population

    def summarize(k: int) -> dict:
        """Member ``k``'s summary.json, as its solo run's when it ends now."""
        m = members[k]
        summary = runner._summary(m.config, views[k], member_dir(out, m), member_parts[k],
                                  first_step, stopped_by, None, SINGLE)  # fmt: skip
        summary["stopped_alone"] = k in diverged
        summary["member"] = {"seed": m.seed, "sets": list(m.sets)}
        return summary

    start = last_line = time.perf_counter()
    stop = runner.StopSignals(twice_stops_at_once=True)
    try:
        with stop:
            while trainer.iteration < trainer.num_iterations and live:
                losses = trainer.iterate()
                for view, stats in zip(views, trainer.member_stats(), strict=True):
                    view.env.add(stats)
                    view.ctx.updates += trainer.updates_per_iteration
                signum = stop.signum
                last = trainer.iteration == trainer.num_iterations or signum is not None
                due = trainer.iteration % config.log.csv_every == 0 or last
                now = time.perf_counter()
                env_state = trainer.env.state_dict() if _saving(trainer, config, last) else None
                for k in sorted(live):
                    views[k].env_state = env_state
                    boundary = Boundary(views[k], losses[k], now, last, signum, due)
                    try:
                        ends = [part.after_iteration(boundary) for part in member_parts[k].parts]
                    except RunError as exc:  # this member's NaN guard: it stops alone
                        live.discard(k)
                        diverged.add(k)
                        ended[k] = summarize(k)
                        echo(f"member {members[k].name} stopped: {exc}")
                        continue
                    if any(ends) and signum is None:  # its on_row: it ends alone, as finished
                        live.discard(k)
                        ended[k] = summarize(k)
                    elif any(ends):
                        stopped_by = signum
                if now - last_line >= config.log.interval_s or last or not live:
                    last_line = now
                    echo(_line(trainer, member_parts, live, now - start, first_step))
                if last or stopped_by is not None:
                    break
    finally:
        for parts in member_parts:
            for part in parts.parts:
                part.close()
    summaries = []
    for k, m in enumerate(members):
        summary = ended[k] if k in ended else summarize(k)
        write_atomic(member_dir(out, m) / "summary.json", json.dumps(summary, indent=2) + "\n")
        summaries.append(summary)
    result = _write_population(out, members, summaries)
    if stopped_by is not None:
        import signal

        name = signal.Signals(stopped_by).name
        echo(f"\ninterrupted ({name}): every member's checkpoint saved at step "
             f"{trainer.global_step:,} in {out}")  # fmt: skip
        raise runner.RunInterrupted(stopped_by)
    if len(diverged) == len(members):
        raise RunError(
            f"every member stopped on non-finite updates; their last good checkpoints are in {out}"
        )
    for m in members:
        runner.pictures(m.config, member_dir(out, m), echo)
    echo(
        f"done: {len(members)} members x {trainer.global_step:,} steps | score median "
        f"{_fmt(result['median_score'])}, worst {_fmt(result['worst_score'])} | {out}"
    )
    return result


def _saving(trainer, config, last: bool) -> bool:
    """Whether the members' checkpoints are written at this boundary (read the env once)."""
    return last or trainer.iteration % config.run.checkpoint_interval == 0


def _silent(*args, **kwargs) -> None:
    pass


def _fmt(value) -> str:
    return "--" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _line(trainer, member_parts, live, elapsed: float, first_step: int) -> str:
    """The population's log line: steps, steps/s over every member, the spread of the scores
    the live members' last metrics rows showed."""
    scores = [member_parts[k].episodes.means["score"] for k in sorted(live)]
    scores = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    members = len(member_parts)
    sps = (trainer.global_step - first_step) * members / max(elapsed, 1e-9)
    spread = "score --"
    if scores:
        spread = (f"score median {statistics.median(scores):.2f} (min {min(scores):.2f}, "
                  f"max {max(scores):.2f})")  # fmt: skip
    stopped = members - len(live)
    return f"step {trainer.global_step:>12,} | {sps:>12,.0f} SPS (all members) | {spread}" + (
        f" | {stopped} stopped" if stopped else ""
    )


def _write_population(out: Path, members, summaries) -> dict:
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

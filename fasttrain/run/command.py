"""``fasttrain run``: its options read once (``RunRequest``), the config they make
(``run_config``), and the run they start: a solo run, a population (``--seeds``), a resume, or
torchrun's ranks (``--nproc``). torch is imported once the command is known good: a refused one
answers at once."""

from __future__ import annotations

import dataclasses
import re
import signal
import sys

import click

from fasttrain.errors import ConfigError

RANK_STOPPED = 2  # exit code of a rank other than 0 that stops on rank 0's reported error


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """``fasttrain run``'s options, read once: every step of the command takes this object."""

    game: str | None = None
    algo: str | None = None
    steps: int | None = None
    num_envs: int | None = None
    device: str | None = None
    seed: int | None = None
    out: str | None = None
    resume: str | None = None
    config_file: str | None = None
    sets: tuple[str, ...] = ()
    nproc: int = 1
    verbose: bool = False
    seeds: str | None = None
    vary: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The options of ``fasttrain run`` that ask for this (torchrun's ranks rerun it)."""
        args = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            flag = "--config" if field.name == "config_file" else f"--{field.name}"
            flag = flag.replace("_", "-")
            if field.name in ("nproc", "seeds", "vary") or value in (None, (), False):
                continue
            if field.name == "sets":
                args += [arg for item in value for arg in ("--set", item)]
            else:
                args += [flag] if value is True else [flag, str(value)]
        return args


def torchrun(request: RunRequest):
    """Run ``torchrun --standalone --nproc_per_node N -m fasttrain run ...`` in this process;
    a failed rank ends it with one line (torchrun's own report is a traceback) and the first
    failure's exit code (130 / 143 after Ctrl-C / SIGTERM, where the ranks saved)."""
    from fasttrain.learners.ranks import launched

    if launched().enabled:  # checked by fasttrain run first: one line for a malformed one
        raise click.UsageError("--nproc starts torchrun itself; under torchrun leave it out")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as launch

    nproc = f"--nproc_per_node={request.nproc}"
    try:
        launch(["--standalone", nproc, "-m", "fasttrain", "run", *request.argv()])
    except SignalException as exc:  # torchrun passed the signal on; the ranks saved and said so
        sys.exit(128 + int(exc.sigval))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = failure.exitcode
        if code in (130, 143):  # the ranks stopped on a signal and saved; they said so
            sys.exit(code)
        if code in (1, RANK_STOPPED):  # a rank's own error: its line (or traceback) is above
            sys.exit(1)
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        click.echo(f"Error: rank {rank} failed ({how}); every rank stopped", err=True)
        sys.exit(1)
    sys.exit(0)


def run_config(request: RunRequest, saved: dict | None = None):
    """The config ``fasttrain run`` trains with, from its options (``saved``: the config of
    the checkpoint it resumes, as a dict): checked, nothing run."""
    from fasttrain.config import resolve as cfg

    layers = [("checkpoint", saved)] if saved is not None else []  # lowest precedence first
    layers += cfg.user_layers(request.config_file, request.sets)
    flags: dict = {}
    for section, key, value in (
        ("run", "algo", request.algo),
        ("run", "device", request.device),
        ("run", "seed", request.seed),
        ("game", "name", request.game),
        ("log", "wide", True if request.verbose else None),
    ):
        if value is not None:
            flags.setdefault(section, {})[key] = value
    # --steps and --num-envs: the chosen learner's, on top of everything, once resolved
    sizes = (("total_timesteps", request.steps), ("num_envs", request.num_envs))
    learner = {k: v for k, v in sizes if v}
    config = cfg.build([*layers, ("command line", flags)])
    cfg.check_sections_apply(config)  # another learner's settings would do nothing
    return config.with_learner("command line", **learner)


def start(request: RunRequest) -> None:
    """Train as ``request`` asks (a solo run, a population, a resume): one line, and exit code 1
    (2 on a rank that stops on rank 0's error), for what a user can cause."""
    # torch is imported once the command is known good: a refused one answers at once
    from fasttrain.learners.ranks import RankStopped, launched
    from fasttrain.run import population as population_run

    resume = request.resume
    try:
        if request.seeds is not None or (resume and population_run.is_population(resume)):
            _run_population(request)
            return
        saved = _resumed_config(resume, request.out) if resume else None
        config = run_config(request, saved)
        from fasttrain.run.runner import run as run_training

        run_training(config, out=request.out, resume=resume)
    except ConfigError as exc:
        if not launched().main:  # rank 0 says it, once for the run
            sys.exit(RANK_STOPPED)
        raise click.ClickException(str(exc)) from None
    except RankStopped:  # rank 0 refused the run and said why
        sys.exit(RANK_STOPPED)
    except RuntimeError as exc:
        ranks = launched()
        if not ranks.enabled:
            raise
        # a collective failed: another rank died, or the timeout ran out
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        first = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0][:300]  # gloo's source path
        raise click.ClickException(f"rank {ranks.rank}: {first}") from None
    except KeyboardInterrupt as exc:  # a run saves its checkpoint first (see runner)
        if not hasattr(exc, "exit_code"):
            click.echo("interrupted", err=True)
        sys.exit(getattr(exc, "exit_code", 130))


def _run_population(request: RunRequest) -> None:
    """``fasttrain run --seeds`` (``fasttrain.run.population``), or ``--resume`` of a
    population's directory; every refusal one line before any work."""
    from fasttrain.run import population as population_run

    if request.seed is not None:
        raise ConfigError("--seeds gives every member its seed; drop --seed")
    if request.resume:
        if request.seeds is not None or request.vary:
            raise ConfigError("--resume continues its population's own members; drop --seeds")
        if request.out:
            raise ConfigError("--resume continues in its own directory; drop --out")
        from fasttrain.run import checkpoint

        members = population_run.saved_members(request.resume)
        with population_run.member_errors(request.resume, members[0].name):
            first = population_run.member_folder(request.resume, members[0], must_exist=True)
            config = run_config(request, checkpoint.config_table(first, checkpoint.load(first)))
        # each member: its own saved settings, this command's on top (applied or refused)
        configure = lambda table: run_config(request, table)  # noqa: E731
        from fasttrain.run.runner import run as run_training  # torch: the command is good

        run_training(config, resume=request.resume, configure=configure)
        return
    _no_seed_setting(request)
    seeds = population_run.parse_seeds(request.seeds)
    plan = population_run.plan_members(seeds, population_run.parse_vary(request.vary))
    config = run_config(request)
    members = []
    for m in plan:
        sets = (*request.sets, *m.sets)
        mine = run_config(dataclasses.replace(request, seed=m.seed, sets=sets))
        members.append(dataclasses.replace(m, config=mine))
    from fasttrain.run.runner import run as run_training

    run_training(config, out=request.out, members=members)


def _no_seed_setting(request: RunRequest) -> None:
    """``--seeds`` gives each member its seed: a ``run.seed`` from ``--set``, or one other than
    the default from a config file (a full config file holds every setting), would be
    overridden without a word, so it is refused, as ``--seed`` is."""
    from fasttrain.config.read import user_layers
    from fasttrain.config.sections import RunConfig

    default = RunConfig().seed
    for label, table in user_layers(request.config_file, request.sets):
        run = table.get("run")
        if isinstance(run, dict) and "seed" in run and (label == "--set" or run["seed"] != default):
            where = "--set run.seed" if label == "--set" else f"{label}: [run] seed"
            raise ConfigError(f"{where}: --seeds gives every member its seed; drop run.seed")


def _resumed_config(resume, out) -> dict:
    """The config of the checkpoint ``--resume`` continues, as a dict; a live run is refused
    before its files are read (rank 0 owns the directory)."""
    from pathlib import Path

    from fasttrain.learners.ranks import launched
    from fasttrain.run import checkpoint
    from fasttrain.run.rundir import RunLock

    if Path(resume).is_dir() and launched().main:
        lock = RunLock(Path(resume))
        lock.acquire()
        lock.release()
    if out:
        raise ConfigError("--resume continues in its own directory; drop --out")
    return checkpoint.config_table(resume, checkpoint.load(resume))

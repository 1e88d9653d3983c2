"""``fasttrain bench``: throughput of games, training, a per-step baseline and peers, in one run.

Every figure is the median of ``repeats`` timed runs after a warm-up (min and max go in the
JSON). Rows, by ``kind``:

- ``env``: env-steps/s of ``VecEnv.step`` with random actions drawn beforehand, per game, backend
  (``python`` reference, ``cpu``, ``cuda`` when used) and ``num_envs``. Compilation happens before
  timing; it is measured on its own as time to first step in fresh subprocesses, with an empty
  cache (cold) and then the filled one (warm).
- ``baseline``: one env on the ``python`` backend with a per-step torch MLP forward, a tensor
  made from a copy of the observation and ``action.item()``: the loop of the trainers fasttrain
  replaces. Every fasttrain row shows its speedup over this row of the same game.
- ``train`` and ``ceiling``: SPS with the default config and the learner-only ceiling of every
  learner in ``fasttrain.learners.LEARNERS``, from ``fasttrain.bench.training.benchmark_training``
  (``algo`` in the JSON; skipped with a note when it fails). Each ``--core`` adds a PPO row
  and its ceiling with the default config and that recurrent ``model.core`` (``ppo+lstm`` in the
  note and the skip notes, ``core`` in the JSON; every training row has one, ``none`` for
  feed-forward); a default config that does not fit the core is skipped with its reason.
  CartPole also gets a PPO row and its ceiling at PufferLib 3.0's own CartPole settings (1024
  envs, batch 65,536, minibatch 8,192, one epoch, one layer of 128; ``settings`` in the JSON
  names it, ``default`` on every other training row), the work PufferLib's steps/s are quoted on.
- ``peer``: Gymnasium's CartPole sync vector env and Stable-Baselines3 PPO on CartPole, when
  installed.

Time to target, under ``targets`` in the JSON and in a table of its own (``--no-targets`` leaves
it out, ``--targets-only`` measures nothing else): training seconds (``time_s``, from the first
iteration, so building and compiling are not in it) until a run of the game's default config,
its tuned presets included, first has a metrics row whose mean over the episodes ended since the
row before reaches the target: CartPole mean return 475, Snake mean score 10 and 20 (one run
records both). Each row is the median over seeds ``seed``, ``seed + 1``, ``seed + 2`` (min, max
and every seed's seconds, steps, best and last value in the JSON); a seed that does not reach the
target counts as infinitely slow, so a median that is not a number reads "not reached in 60 s
(best 212)". Each run stops at the target, at its default total_timesteps, or after a budget of
training seconds (CartPole 60, Snake 300). Beside CartPole, Stable-Baselines3 PPO with RL-Zoo's
tuned CartPole-v1 settings is timed to the same return on Gymnasium's CartPole-v1 (budget 120 s),
its mean taken over the episodes ended in each rollout and its clock read after each update;
"vs SB3" is its median seconds over fasttrain's. ``--quick`` runs one seed, CartPole 30 s and
SB3 20 s, and leaves Snake out (its runs take minutes).

``--quick`` answers "how fast is this on my machine" in about a minute: Snake and CartPole
(``--game all`` or names for others), their cpu env rows at two sizes, their per-step baselines,
one PPO training row with its ceiling (the first game's), the peers and CartPole's time to
target; compile times and the rows at other settings are left out (skip notes say so).

``plan`` checks the options and fixes what to measure, ``stages`` measures it stage by stage
with the timings of ``measure``, ``report`` prints and writes.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time

import click

from fasttrain.bench.measure import time_repeats
from fasttrain.bench.plan import RECURRENT_CORES, make_plan, parse_num_envs
from fasttrain.bench.report import machine_info, report
from fasttrain.bench.stages import run_stages

__all__ = ["bench", "parse_num_envs", "time_repeats"]


def check_budget(ctx, param, value):
    """``--budget``: a finite number of seconds (click's range lets NaN and inf through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(
            f"training seconds > 0 such as 600, got {value:g} (leave it out for each preset's "
            "whole run)"
        )
    return value


@click.command()
@click.option(
    "--game",
    "game_names",
    multiple=True,
    type=click.UNPROCESSED,
    help="Game to measure (repeatable; all: every registered game; default: all, or Snake and "
    "CartPole with --quick).",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda", "auto"]),
    default="auto",
    show_default=True,
    help="Device for training; cuda also adds cuda env rows.",
)
@click.option(
    "--num-envs",
    "num_envs",
    callback=parse_num_envs,
    default=None,
    help="Comma-separated num_envs sweep for every backend (default: per backend).",
)
@click.option(
    "--backend",
    "backend_names",
    multiple=True,
    type=click.Choice(["python", "cpu", "cuda"]),
    help="Backend for the env rows (repeatable; default: python, cpu, and cuda with "
    "--device cuda).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="About a minute: Snake and CartPole env rows, their baselines, one PPO training row, "
    "the peers and CartPole's time to target (--game all or names for more games).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every figure and the machine to this JSON file.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG of env-steps/s against num_envs (needs the plot extra).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Numba and torch threads (default: every core Numba sees).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Timed repeats per figure (default 5, quick 3).",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds per timed repeat (default 1, quick 0.25).",
)
@click.option(
    "--train-iterations",
    type=click.IntRange(min=1),
    default=None,
    hidden=True,
    help="Iterations per training call of each learner (default 10, quick 1).",
)
@click.option(
    "--train-num-envs",
    type=click.IntRange(min=1),
    default=None,
    help="num_envs for the training rows instead of the game's default config.",
)
@click.option(
    "--core",
    "cores",
    multiple=True,
    type=click.Choice(RECURRENT_CORES),
    help="Also measure PPO training with this recurrent core (model.core), beside the "
    "feed-forward rows (repeatable).",
)
@click.option(
    "--targets/--no-targets",
    default=True,
    show_default=True,
    help="Time to target: training seconds until the default config reaches CartPole return 475 "
    "and Snake score 10 and 20, beside SB3 PPO on CartPole (quick: 1 seed, no Snake).",
)
@click.option("--targets-only", is_flag=True, help="Measure only the time-to-target rows.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--learning",
    is_flag=True,
    help="Instead: train each --game (default: Snake and the MinAtar games) with its defaults "
    "once per --seeds and write learning.md, learning.json and learning.png to --out.",
)
@click.option(
    "--seeds",
    default="0,1,2",
    show_default=True,
    help="--learning: comma-separated seeds of each game's runs, trained as one population "
    "where the game's learner can (see --solo).",
)
@click.option(
    "--solo",
    is_flag=True,
    help="--learning: train a game's seeds one after another, each its own run, instead of as "
    "one population (the default where the game's learner trains populations: PPO).",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=0, min_open=True),
    callback=check_budget,
    default=None,
    help="--learning: training seconds per run at most (default: each preset's whole run).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="--learning: total_timesteps of every run instead of the presets'.",
)
@click.option(
    "--algo",
    default=None,
    help="--learning: the learner of every game [default: each game's own: PQN for Seaquest "
    "and Asterix, PPO elsewhere].",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="--learning: folder of the runs and the results; a finished run there (or one this "
    "--budget cut) of the same game, learner, settings, steps and seed is read, not run again; "
    "another run's folder is renamed <folder>.old and trained again "
    "[default: runs/learning-<algo>-<time>].",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="--learning: a config override for every run (repeatable), e.g. --set run.amp=off.",
)
def bench(learning, seeds, solo, budget, steps, algo, out, sets, **options):
    """Measure env-steps/s, PPO SPS, a per-step baseline, peers and time to target; print tables.
    With --learning, measure what the default presets learn instead."""
    import numba
    import torch

    ctx = click.get_current_context()
    given = {
        name
        for name, value in ctx.params.items()
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    }
    flag = {p.name: p.opts[0] for p in ctx.command.params}
    own = {"seeds", "solo", "budget", "steps", "algo", "out", "sets"}
    shared = {"learning", "game_names", "device"}
    if not learning and given & own:
        raise click.UsageError(f"{flag[sorted(given & own)[0]]} needs --learning")
    if learning and given - own - shared:
        name = flag[sorted(given - own - shared)[0]]
        raise click.UsageError(f"{name} is for the speed tables: leave it out of --learning")
    if learning:
        from fasttrain.bench.learning import DEFAULT_GAMES, parse_seeds, run_suite

        games = list(dict.fromkeys(options["game_names"])) or list(DEFAULT_GAMES)
        out = out or time.strftime(f"runs/learning-{algo or 'default'}-%Y%m%d-%H%M%S")
        seeds = parse_seeds(seeds)
        with suite_signals(out):
            run_suite(games, seeds, algo, budget, steps, options["device"], sets, out, solo=solo)
        return
    plan = make_plan(**options)  # every check happens here, before anything is measured
    numba.set_num_threads(plan.threads)
    torch.set_num_threads(plan.threads)
    started = time.perf_counter()
    machine = machine_info(plan.threads)
    results = run_stages(plan)
    report(plan, results, machine, started)


@contextlib.contextmanager
def suite_signals(out):
    """SIGINT and SIGTERM during ``bench --learning``: inside a run's training loop the run
    saves its checkpoint at the iteration boundary (``fasttrain.run.runner``), anywhere else
    nothing unsaved is lost and the suite ends at once; then one line, and exit 130 / 143. The
    same command continues the suite."""
    from fasttrain.run.startup import EXIT_CODES

    again = f"every run keeps its last checkpoint; the same command continues the suite in {out}"

    def at_once(signum, frame):  # between runs, or while one starts: nothing to save
        with contextlib.suppress(Exception):  # a write this signal interrupted: say it anyway
            sys.stdout.flush()
        os.write(2, f"interrupted ({signal.Signals(signum).name}): {again}\n".encode())
        os._exit(EXIT_CODES[signum])

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, at_once) for s in EXIT_CODES} if main_thread else {}
    try:
        yield
    except KeyboardInterrupt as exc:  # a run stopped on the signal and saved its checkpoint
        code = getattr(exc, "exit_code", EXIT_CODES[signal.SIGINT])
        click.echo(f"interrupted ({signal.Signals(code - 128).name}): {again}", err=True)
        sys.exit(code)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

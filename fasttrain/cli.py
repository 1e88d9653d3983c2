"""The ``fasttrain`` command line: games, play, eval, run, sweep, bench."""

from __future__ import annotations

from fasttrain.run import startup

if __name__ == "__main__":  # `python -m fasttrain.cli`: one line, not a traceback, on a Ctrl-C
    startup.take()  # while click and fasttrain.bench import below

import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import click  # noqa: E402

from fasttrain import environ  # noqa: E402
from fasttrain.config import presets  # noqa: E402
from fasttrain.errors import ConfigError, one_line  # noqa: E402
from fasttrain.learners import LEARNERS, variable_settings  # noqa: E402

POPULATION_LEARNERS = [name for name, learner in LEARNERS.items() if learner.population]
SEED = click.IntRange(0, 2**64 - 1)  # every seed fasttrain takes: environments and torch alike
FPS_RANGE = (0.1, 1000.0)  # GIF frames last 10 ms to 10 s; a terminal shows about as many


def check_fps(fps: float, gif: bool) -> None:
    """``--fps``: 0 (as fast as possible, terminal only) or a number of frames per second."""
    low, high = FPS_RANGE
    if fps == 0:
        if gif:
            raise click.BadParameter(
                f"a GIF needs --fps > 0 ({low:g} to {high:g})", param_hint="--fps"
            )
        return
    if not low <= fps <= high:  # NaN fails both comparisons
        zero = "" if gif else "0 (as fast as possible) or "
        raise click.BadParameter(f"{zero}{low:g} to {high:g}, got {fps:g}", param_hint="--fps")


class Commands(click.Group):
    """The command group. An error a user can cause, raised anywhere inside a command, ends
    here in one line and exit code 1: a bad file or setting (``ConfigError``, ``RunError``),
    a size the machine cannot hold (``MemoryError``), a file system's refusal (``OSError``)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (ConfigError, MemoryError, OSError) as exc:
            raise click.ClickException(one_line(exc)) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fasttrain")
def main():
    """fasttrain: fast reinforcement learning with Numba-compiled games and a PyTorch learner."""


@main.command()
@click.option(
    "--game", default=None, help="Game to train on (see `fasttrain games`). [default: snake]"
)
@click.option(
    "--algo",
    default=None,
    help=f"Learning algorithm: {', '.join(LEARNERS)} (see fasttrain.learners). [default: the "
    f"game's preset names it: {presets.default_learners()}]",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Total environment steps (with --resume: the new total).",
)
@click.option("--num-envs", type=click.IntRange(min=1), default=None, help="Parallel environments.")
@click.option("--device", default=None, help="auto, cpu or cuda. [default: auto]")
@click.option("--seed", type=SEED, default=None)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Run directory [default: runs/<game>-<algo>-<time>].",
)
@click.option(
    "--resume",
    type=click.Path(file_okay=False),
    default=None,
    help="Continue the run in this directory from its checkpoint.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file with any keys of config.toml.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override one config key (repeatable), e.g. --set ppo.learning_rate=3e-4.",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Data-parallel processes on this machine: starts torchrun --standalone "
    "--nproc_per_node N (for several machines run torchrun yourself).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Log lines with every loss and where the time went (log.wide = true), wider than "
    "120 columns.",
)
@click.option(
    "--seeds",
    default=None,
    metavar="LIST",
    help=f"Train one member ({' or '.join(name.upper() for name in POPULATION_LEARNERS)}) per "
    "seed side by side in this process, e.g. 0,1,2 or 0-7: a member directory seed-S per seed "
    "(see docs/training.md, Populations).",
)
@click.option(
    "--vary",
    multiple=True,
    metavar="KEY=V1,V2",
    help="With --seeds: one member per seed and value (a grid over every --vary), e.g. "
    f"--vary ppo.learning_rate=1e-3,3e-4 ({variable_settings()}).",
)
def run(**options):
    """Train an agent; writes config, metrics.csv, checkpoint.pt and summary.json."""
    from fasttrain.learners import ranks
    from fasttrain.run.command import RunRequest, start, torchrun

    ranks.checked()  # torchrun's variables, which what follows reads: a bad one is one line
    request = RunRequest(**options)
    if request.vary and request.seeds is None:
        raise click.UsageError("--vary needs --seeds: the members are every seed x value")
    if request.nproc > 1:
        if request.seeds is not None:
            raise click.UsageError("--seeds trains its members in one process; drop --nproc")
        torchrun(request)
    # until the run's own handlers take over at its first iteration, a signal ends the process
    # at once in one line: start-up writes nothing a run would need (and a KeyboardInterrupt
    # inside an import can surface as another error, with a traceback)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, startup.exit_now) for s in EXIT_CODES} if main_thread else {}
    try:
        start(request)
    finally:
        startup.restore(previous)


EXIT_CODES = startup.EXIT_CODES


@main.command()
def games():
    """List the registered games."""
    from fasttrain import games as registry

    rows = [("name", "observation", "actions", "agents")]
    for name in registry.names():
        spec = registry.get(name)
        params = spec.params_cls()
        shape = "x".join(str(s) for s in spec.obs_shape(params))
        dtype = spec.obs_dtype.__name__
        agents = str(spec.agents(params))
        if callable(spec.num_agents):
            agents += " (a param)"
        actions = str(spec.actions(params))
        if callable(spec.num_actions):
            actions += " (a param)"
        rows.append((name, f"{dtype} {shape}", actions, agents))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    from fasttrain.kernels.gpu import backends_line

    click.echo(f"\n{backends_line()}")


@main.command()
@click.option(
    "--game",
    default=None,
    type=click.UNPROCESSED,
    help="Game to play (see `fasttrain games`). [default: the checkpoint's game, else snake]",
)
@click.option(
    "--policy",
    type=click.Choice(["random", "checkpoint"]),
    default=None,
    help="Who plays: uniform random actions, or the agent in --checkpoint.",
)
@click.option(
    "--checkpoint",
    type=click.Path(),
    default=None,
    help="Run directory (or checkpoint.pt) of a trained agent.",
)
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True)
@click.option(
    "--fps",
    type=float,
    default=10.0,
    show_default=True,
    help="Frames per second, 0.1 to 1000 (on a terminal 0 also: as fast as possible).",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--gif",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write an animated GIF of the --steps steps here instead (extra media).",
)
def play(game, policy, checkpoint, steps, fps, seed, gif):
    """Watch one environment play in the terminal, or write it as an animated GIF."""
    import torch

    import fasttrain
    from fasttrain import games as registry

    policy = policy or ("checkpoint" if checkpoint else "random")
    if policy == "checkpoint" and not checkpoint:
        raise click.UsageError("--policy checkpoint needs --checkpoint DIR")
    if policy == "random" and checkpoint:
        raise click.UsageError("--policy random plays without an agent: drop --checkpoint")
    if game is None and checkpoint:
        game = run_game(checkpoint)
    game = game or "snake"
    if game not in registry.names():
        raise click.BadParameter(
            f"unknown game {game!r}; valid: {', '.join(registry.names())}", param_hint="--game"
        )
    check_fps(fps, gif is not None)
    from fasttrain import media

    if gif is not None:
        from fasttrain.run.rundir import check_output_file

        if registry.get(game).render_rgb is None:
            drawn = [n for n in registry.names() if registry.get(n).render_rgb is not None]
            raise click.BadParameter(
                f"{game!r} has no colour pictures; games with them: {', '.join(drawn)}",
                param_hint="--game",
            )
        media.check_gif_steps(steps)
        check_output_file(gif)
        media.check_media()
    act = None
    game_params = {}
    repeat = 1
    if checkpoint:
        from fasttrain.run.checkpoint import load, load_agent, saved_config

        act, game_params = load_agent(checkpoint, game)
        repeat = saved_config(checkpoint, load(checkpoint)).run.action_repeat
    env = fasttrain.make(
        game, num_envs=1, backend="cpu", seed=seed, action_repeat=repeat, **game_params
    )
    generator = torch.Generator().manual_seed(seed)
    if gif is not None:
        frames = media.replay_frames(env, steps, act, generator)
        media.write_gif(gif, frames, fps)
        height, width = frames[0].shape[:2]
        click.echo(f"wrote {gif}: {len(frames)} frames of {width}x{height} at {fps:g} fps")
        return
    media.play_in_terminal(env, game, steps, fps, act, generator, click.echo)


def run_game(checkpoint) -> str:
    """The game of the run a checkpoint belongs to: its run directory's config.toml, else the
    checkpoint's own config (a checkpoint copied into another run's folder is refused later)."""
    from fasttrain.config import resolve as cfg
    from fasttrain.run.checkpoint import checkpoint_path, load, saved_config

    written = checkpoint_path(checkpoint).parent / "config.toml"
    if written.is_file():
        name = cfg.load_toml(written).get("game", {}).get("name")
        if isinstance(name, str):
            return name
    return saved_config(checkpoint, load(checkpoint)).game.name


@main.command("eval")
@click.option(
    "--run",
    "run_dir",
    type=click.Path(),
    default=None,
    help="Run directory (or checkpoint.pt) of a trained agent.",
)
@click.option(
    "--game",
    default=None,
    type=click.UNPROCESSED,
    help="Game for --random without a run (its default params).",
)
@click.option("--episodes", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--num-envs", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--greedy", is_flag=True, help="Play the most likely action (default: sample the policy)."
)
@click.option(
    "--random",
    "random_baseline",
    is_flag=True,
    help="Also play uniformly random actions in the same world, for a baseline.",
)
@click.option(
    "--bots",
    "against_bots",
    is_flag=True,
    help="Also play the agent beside each bot policy of the game (the arena's random, greedy "
    "and cautious snakes), reporting the bots' food per life and survival.",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--json", "json_file", type=click.Path(dir_okay=False), default=None, help="Write results here."
)
def eval_command(
    run_dir, game, episodes, num_envs, greedy, random_baseline, against_bots, seed, json_file
):
    """Play fresh environments with a fixed seed until N episodes end; report the means.

    With several agents per environment an episode is one agent's life: score is what one life
    gathers (food per life in the arena), length how long it lived.
    """
    import json

    from fasttrain import games as registry
    from fasttrain.evaluate import evaluate_run

    if run_dir is None and game is None:
        raise click.UsageError("eval needs --run DIR, or --game NAME with --random")
    if run_dir is None and not random_baseline:
        raise click.UsageError("without --run there is no agent: add --random for a baseline")
    if run_dir is None and (greedy or against_bots):
        flag = "--greedy" if greedy else "--bots"
        raise click.UsageError(f"{flag} plays a trained agent: add --run DIR")
    if game is not None and game not in registry.names():
        raise click.BadParameter(
            f"unknown game {game!r}; valid: {', '.join(registry.names())}", param_hint="--game"
        )
    if json_file:
        from fasttrain.run.rundir import check_output_file

        check_output_file(json_file)  # before the episodes are played
    try:
        evaluation = evaluate_run(
            run_dir, game, episodes, num_envs, seed, greedy, random_baseline, against_bots
        )
    except (ValueError, TypeError) as exc:  # make's one-line errors (ConfigError too)
        raise click.ClickException(one_line(exc)) from None
    click.echo(f"{evaluation.game}: {num_envs} envs, seed {seed}, first {episodes} episodes")
    for line in evaluation.report():
        click.echo(line)
    if json_file:
        from fasttrain.run.rundir import json_safe, write_atomic

        rows = [json_safe(r.as_dict()) for r in evaluation.results]
        payload = {"game": evaluation.game, "params": evaluation.params, "results": rows}
        write_atomic(json_file, json.dumps(payload, indent=2) + "\n")


@main.command("sweep")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    required=True,
    help="Sweep file: a config TOML plus a [sweep] table (see examples/sweep_cartpole.toml).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Sweep directory; again with the same file continues the study "
    "[default: runs/sweep-<game>-<algo>-<time>].",
)
@click.option(
    "--trials", type=click.IntRange(min=1), default=None, help="Trials in the study (sweep.trials)."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override one config or sweep key (repeatable), e.g. --set sweep.budget_s=20.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**32 - 1),
    default=None,
    help="Seed of the TPE sampler (sweep.seed).",
)
@click.option(
    "--population",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Trials trained at a time as one PPO or PQN population in this process (their params "
    "must be settings members may vary: see docs/training.md, Populations).",
)
def sweep_command(config_file, out, trials, sets, seed, population):
    """Search hyperparameters with Optuna; every trial is a run directory in --out."""
    from fasttrain import sweep, sweepfile
    from fasttrain.config import resolve as cfg

    try:
        sweep.require_optuna()  # first: without it nothing else matters
        from fasttrain.run.runner import RunInterrupted

        def terminate(signum, frame):  # between trials too: write the table, exit 143
            raise RunInterrupted(signum)

        spec = sweepfile.from_layers(cfg.user_layers(config_file, sets), trials=trials, seed=seed)
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, terminate) if main_thread else None
        try:
            results = sweep.sweep(spec, out, population=population)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    except KeyboardInterrupt as exc:  # the trial in flight saved its checkpoint (see runner)
        sys.exit(getattr(exc, "exit_code", 130))
    if not any(r.state == "complete" for r in results):
        raise click.ClickException("no trial completed; the notes above say why")


@main.command("plot")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option(
    "--x",
    "x_axis",
    type=click.Choice(["steps", "time"]),
    default="steps",
    show_default=True,
    help="Environment steps (global_step) or seconds of training (time_s).",
)
@click.option(
    "--y",
    "ys",
    multiple=True,
    help="metrics.csv column, once per panel. [default: charts/episodic_return]",
)
@click.option("--out", type=click.Path(dir_okay=False), default="curves.png", show_default=True)
def plot(run_dirs, x_axis, ys, out):
    """Overlay the learning curves of runs in one PNG (extra plot)."""
    from fasttrain.plot import plot_runs

    path = plot_runs(run_dirs, out, x_axis, ys)
    click.echo(f"wrote {path} ({len(run_dirs)} run{'s' if len(run_dirs) > 1 else ''})")


@main.group("checkpoint")
def checkpoint_group():
    """Look into checkpoints."""


@checkpoint_group.command("inspect")
@click.argument("path", type=click.Path())
def inspect_command(path):
    """Print what a checkpoint (or a run directory's) holds: format, game, learner, model,
    steps and networks. Nothing in it runs, and no weights are loaded into a network."""
    from fasttrain.run.checkpoint import describe

    for line in describe(path):
        click.echo(line)


from fasttrain.bench import bench  # noqa: E402

main.add_command(bench)


def entry():
    """The ``fasttrain`` command: ``main`` with a Ctrl-C during start-up ending in one line,
    a bad environment variable refused in one line before any command starts, and an exit
    that a background compile still running cannot turn into an abort."""
    startup.release()  # the imports are done: each command takes the signals as it chooses
    startup.hold()
    try:
        environ.check_at_start()  # before Numba imports: it reads NUMBA_NUM_THREADS then
        main()
        code = 0  # not reached: click's main ends in sys.exit
    except ConfigError as exc:  # a bad environment variable, before any command started
        click.echo(f"Error: {exc}", err=True)
        code = 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        code = 130
    except SystemExit as exc:
        code = exc.code
    if isinstance(code, str):  # sys.exit("message"): Python prints it and exits 1
        click.echo(code, err=True)
        code = 1
    compiling = sys.modules.get("fasttrain.learners.compile")  # imported (with torch) by runs only
    busy = compiling is not None and compiling.compiling_in_background()
    if busy or code in EXIT_CODES.values():  # see startup.leave: Python's finalizing would
        startup.leave(code or 0)  # abort under the compile thread, or die by a second signal
    sys.exit(code)


if __name__ == "__main__":
    entry()

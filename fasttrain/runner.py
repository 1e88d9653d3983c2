"""A training run: its directory, log lines, metrics.csv, checkpoints, Ctrl-C and resume."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import click

from fasttrain import checkpoint
from fasttrain.config import CONFIG_HEADER, Config, ConfigError, to_toml
from fasttrain.learners import LEARNERS

# The columns of a PPO run's metrics.csv; other algorithms put their own losses/... in the middle.
METRICS = (
    "global_step",
    "time_s",
    "sps",
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/score",
    "charts/learning_rate",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "time/env",
    "time/forward",
    "time/learn",
    "time/other",
)
# Short names of loss columns in the log line; other keys print their last path component.
SHORT = {
    "losses/policy_loss": "pg",
    "losses/value_loss": "v",
    "losses/entropy": "ent",
    "losses/approx_kl": "kl",
    "losses/clipfrac": "clip",
    "losses/td_loss": "td",
    "losses/q_values": "q",
    "charts/epsilon": "eps",
}


def default_out(config: Config) -> Path:
    return Path("runs") / f"{config.game.name}-{config.run.algo}-{time.strftime('%Y%m%d-%H%M%S')}"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(config: Config, out=None, resume=None, echo=click.echo) -> dict:
    """Train with ``config`` (any registered learner) into the run directory ``out``, or
    continue the run in ``resume``; returns the run summary."""
    Trainer = LEARNERS[config.run.algo].trainer

    state = None
    if resume is not None:
        out = Path(resume)
        state = checkpoint.load(out)
    else:
        out = Path(out) if out else default_out(config)
        if (out / checkpoint.FILENAME).exists():
            raise ConfigError(
                f"{out} already holds a run; continue it with --resume {out} "
                "or choose another --out"
            )
    trainer = Trainer(config, warn=echo)  # every check and compile happens before any write
    if state is not None:
        trainer.load_state_dict(state)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.toml", to_toml(config, CONFIG_HEADER))
    args = trainer.args
    overrides = config.overrides()
    echo(
        f"fasttrain: {config.game.name} {config.run.algo} on {trainer.device} | "
        f"{trainer.describe()} | {args.total_timesteps:,} steps | run dir {out}"
        + (f" | settings: {', '.join(overrides)}" if overrides else "")
    )

    metrics_path = out / "metrics.csv"
    new_file = state is None or not metrics_path.exists()
    columns = None
    if not new_file:  # appending: keep the file's columns
        with open(metrics_path, newline="") as f:
            columns = next(csv.reader(f), None)
    metrics_file = open(metrics_path, "w" if new_file else "a", newline="")
    writer = None  # made at the first row: its columns follow the algorithm's losses
    time_offset = state.get("time_s", 0.0) if state else 0.0
    start = time.perf_counter()
    last_log_time, last_log_step = start, trainer.global_step
    episode = {"return": float("nan"), "length": float("nan"), "score": float("nan")}
    row: dict = {}
    show_bar = config.log.progress and sys.stdout.isatty()
    bar = click.progressbar(length=args.total_timesteps, label="training") if show_bar else None

    def save():
        checkpoint.save(
            out / checkpoint.FILENAME,
            {
                **trainer.state_dict(),
                "config": to_toml(config),
                "time_s": time_offset + time.perf_counter() - start,
            },
        )

    interrupted = False
    try:
        while trainer.iteration < trainer.num_iterations:
            step_before = trainer.global_step
            losses = trainer.iterate()
            if bar is not None:
                bar.update(trainer.global_step - step_before)
            now = time.perf_counter()
            last = trainer.iteration == trainer.num_iterations
            if now - last_log_time >= config.log.interval_s or last:
                stats = trainer.env.stats()
                if stats:
                    episode = stats
                split = trainer.timers.split()
                trainer.timers.reset()
                sps = (trainer.global_step - last_log_step) / (now - last_log_time)
                row = {
                    "global_step": trainer.global_step,
                    "time_s": round(time_offset + now - start, 3),
                    "sps": round(sps, 1),
                    "charts/episodic_return": episode["return"],
                    "charts/episodic_length": episode["length"],
                    "charts/score": episode["score"],
                    "charts/learning_rate": trainer.learning_rate,
                    **losses,
                    **{f"time/{k}": round(v, 4) for k, v in split.items()},
                }
                if writer is None:
                    writer = csv.DictWriter(metrics_file, fieldnames=columns or list(row))
                    if columns is None:
                        writer.writeheader()
                writer.writerow(row)
                metrics_file.flush()
                echo(
                    f"{'' if bar is None else chr(10)}step {trainer.global_step:>11,} | "
                    f"{sps:>9,.0f} SPS | return {episode['return']:7.2f} | "
                    f"score {episode['score']:6.2f} | len {episode['length']:6.1f} | "
                    + " ".join(
                        f"{SHORT.get(k, k.split('/')[-1])} {v:.4g}" for k, v in losses.items()
                    )
                    + " | "
                    + " ".join(f"{k} {v:.0%}" for k, v in split.items())
                )
                last_log_time, last_log_step = now, trainer.global_step
            if trainer.iteration % config.run.checkpoint_interval == 0 or last:
                save()
    except KeyboardInterrupt:
        interrupted = True
        save()
        echo(f"\ninterrupted: checkpoint saved at step {trainer.global_step:,} in {out}")
    finally:
        metrics_file.close()
        if bar is not None:
            bar.render_finish()

    elapsed = time.perf_counter() - start
    summary = {
        "game": config.game.name,
        "algo": config.run.algo,
        "global_step": trainer.global_step,
        "wall_s": round(elapsed, 2),
        "sps": round((trainer.global_step - (state or {}).get("global_step", 0)) / elapsed, 1),
        "episodic_return": episode["return"],
        "episodic_length": episode["length"],
        "score": episode["score"],
        "interrupted": interrupted,
        "run_dir": str(out),
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    echo(
        f"done: {summary['global_step']:,} steps in {elapsed:.1f} s ({summary['sps']:,.0f} SPS) | "
        f"mean return {episode['return']:.2f} | mean score {episode['score']:.2f} | {out}"
    )
    if interrupted:
        raise KeyboardInterrupt
    return summary

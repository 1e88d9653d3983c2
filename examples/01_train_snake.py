"""Train PPO on Snake through the Python API, then watch the agent play.

This is what `fasttrain run --game snake` does, step by step, so you can change any part:
  1. build a Config: the defaults of config.toml plus your overrides (same keys as --set);
  2. train: the runner writes config.toml, metrics.csv, checkpoint.pt and summary.json;
  3. load the checkpoint as a greedy agent and play one episode in the terminal.

Run:  python examples/01_train_snake.py [train_steps]   (or FASTTRAIN_EXAMPLE_STEPS=...)
"""

from __future__ import annotations

import os
import sys
import tempfile

import fasttrain
from fasttrain.config import resolve as cfg
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.runner import run


def budget() -> int:
    """Training steps: argv[1], else $FASTTRAIN_EXAMPLE_STEPS, else a short real run."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FASTTRAIN_EXAMPLE_STEPS")
    return int(float(raw)) if raw else 1_000_000


# 1. Configuration. Any key of config.toml can be set here, exactly as with `--set` on the
#    command line; what you set beats Snake's tuned learner settings
#    (fasttrain/config/presets/snake.toml), which beat the built-in defaults. A small 8x8 board
#    learns quickly.
steps = budget()
config = cfg.load(
    sets=[
        "game.snake.height=8",
        "game.snake.width=8",
        f"ppo.total_timesteps={steps}",
        "log.progress=false",
        "log.interval_s=10",
    ]
)
print(f"training PPO on snake 8x8 for {steps:,} steps")

# 2. Train. `run` returns the run summary; the run directory holds everything needed to
#    resume (`fasttrain run --resume DIR --steps N`) or to play.
workdir = tempfile.TemporaryDirectory(prefix="fasttrain-")  # removed at the end
run_dir = os.path.join(workdir.name, "snake-ppo")
summary = run(config, out=run_dir)
print(
    f"trained: mean score {summary['score']:.2f} (fruits per episode) in {summary['wall_s']:.0f} s"
)

# 3. Play: the checkpoint becomes a greedy policy `obs -> actions`; one environment, rendered.
act, game_params = load_agent(run_dir)
env = fasttrain.make("snake", num_envs=1, backend="cpu", seed=123, **game_params)
total, frames = 0.0, 0
while frames < 300:
    _, reward, terminated, truncated = env.step(act(env.obs))
    total += float(reward[0])
    frames += 1
    if bool(terminated[0] | truncated[0]):
        break
print(env.render(0))
print(f"played one episode: {frames} steps, return {total:+.1f}")
workdir.cleanup()

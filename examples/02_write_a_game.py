"""Write a new game in one file, check it on every backend, and train PPO on it.

A fasttrain game is plain Python: no numba import, no decorators. You write the rules for ONE
environment as scalar code, `reset_one(i, io, s, p)` and `step_one(i, io, s, p)`, over three
objects fasttrain builds for you:
  * `io`: the I/O buffers: `io.actions[i]`, `io.obs[i, ...]` (and `io.obs_flat[i, k]`, the same
    memory flattened), `io.rewards[i]`, `io.terminated[i]`, `io.truncated[i]`, `io.score[i]`;
  * `s`: the state: every array declared in STATE by its name (`s.paddle[i]`), and `s.rng`,
    the environment's random stream;
  * `p`: the params by name (`p.cols`).
Helpers take the same objects (`write_obs(i, io, s, p)`). fasttrain compiles the functions for
the CPU (numba, parallel over environments) and for NVIDIA GPUs (numba-cuda), and runs them
uncompiled as the "python" reference backend.

The rules of thumb that keep a game compilable everywhere:
  * scalar code only: no lists, dicts, NumPy calls that allocate, or Python objects of your own;
  * call helpers by their plain name (`drop_ball(...)`, not `module.drop_ball(...)`);
  * random numbers only through `rand_int(s.rng, i, n)` / `rand_float(s.rng, i)`;
  * every array the game keeps is declared in STATE, with its per-env shape and dtype;
  * write into arrays (`s.paddle[i] = 3`), never into the objects (`s.paddle = ...`).

Run:  python examples/02_write_a_game.py [train_steps]   (or FASTTRAIN_EXAMPLE_STEPS=...)
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

import fasttrain
from fasttrain.config.resolve import load
from fasttrain.kernels import Field, GameSpec, assert_backends_agree, cuda_available, rand_int
from fasttrain.run.runner import run

# --------------------------------------------------------------------------- the game: Catch
#
# In fasttrain/games/<name>.py the docstring is the game's spec; in this script it is this comment.
#
# Catch: a ball falls one row per step down a rows x cols board; catch it with the paddle.
# Observation: float32 (3,): ball row / (rows-1), ball column / (cols-1), paddle column / (cols-1).
# Actions: 0 move the paddle left, 1 stay, 2 move right (a move into the wall stays put).
# Rewards: +1 when the ball reaches the bottom row above the paddle, -1 when it lands elsewhere.
# Terminated: the ball reaches the bottom row. Truncated: never. Score: 1 per catch.

LEFT, STAY, RIGHT = 0, 1, 2


@dataclass(frozen=True)
class CatchParams:
    """Tunable numbers; `fasttrain.make("catch", rows=12)` overrides them by name."""

    rows: int = 10
    """board rows (the ball falls rows - 1 steps)"""
    cols: int = 5
    """board columns"""

    def __post_init__(self):
        if self.rows < 2 or self.cols < 2:
            raise ValueError("catch needs rows >= 2 and cols >= 2")


# Every array the game keeps, per environment (shape () means one number per env).
STATE = (
    Field("ball_row", lambda p: (), np.int32, "() row of the ball, 0 at the top"),
    Field("ball_col", lambda p: (), np.int32, "() column of the ball"),
    Field("paddle", lambda p: (), np.int32, "() column of the paddle on the bottom row"),
)


def write_obs(i, io, s, p):
    """Scale the state into the float32 observation row of env i."""
    io.obs[i, 0] = s.ball_row[i] / (p.rows - 1)
    io.obs[i, 1] = s.ball_col[i] / (p.cols - 1)
    io.obs[i, 2] = s.paddle[i] / (p.cols - 1)


def move_paddle(column, action, cols):
    """The paddle column after `action`; moving into a wall keeps it where it is."""
    column += action - 1  # LEFT -1, STAY 0, RIGHT +1
    return min(max(column, 0), cols - 1)


def reset_one(i, io, s, p):
    """A new ball in a random column of the top row; the paddle in a random column."""
    s.ball_row[i] = 0
    s.ball_col[i] = rand_int(s.rng, i, p.cols)
    s.paddle[i] = rand_int(s.rng, i, p.cols)
    write_obs(i, io, s, p)


def step_one(i, io, s, p):
    """Move the paddle, drop the ball one row, and score it when it lands."""
    s.paddle[i] = move_paddle(s.paddle[i], io.actions[i], p.cols)
    s.ball_row[i] += 1
    landed = s.ball_row[i] == p.rows - 1
    caught = landed and s.ball_col[i] == s.paddle[i]
    io.rewards[i] = 0.0
    if landed:
        io.rewards[i] = 1.0 if caught else -1.0
    if caught:
        io.score[i] += 1.0
    io.terminated[i] = landed  # the runtime resets the env and keeps the last obs in final_obs
    io.truncated[i] = False
    write_obs(i, io, s, p)


def render_text(state, params) -> str:
    """'o' the ball, '=' the paddle, '.' empty."""
    grid = [["."] * params.cols for _ in range(params.rows)]
    grid[params.rows - 1][int(state["paddle"])] = "="
    grid[int(state["ball_row"])][int(state["ball_col"])] = "o"
    return "\n".join("".join(row) for row in grid)


SPEC = GameSpec(
    name="catch",
    params_cls=CatchParams,
    state=STATE,
    obs_shape=lambda p: (3,),
    obs_dtype=np.float32,
    num_actions=3,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
)


def budget() -> int:
    """Training steps: argv[1], else $FASTTRAIN_EXAMPLE_STEPS, else a real (but short) run."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FASTTRAIN_EXAMPLE_STEPS")
    return int(float(raw)) if raw else 200_000


def main():
    # 1. Register: from now on fasttrain.make("catch", ...) and the config system know the game.
    fasttrain.games.register(SPEC)
    print("registered games:", ", ".join(fasttrain.games.names()))

    # 2. Check it on every backend: the same seed and actions must give bit-identical buffers,
    #    final observations and stats after every step. "python" runs the functions above
    #    uncompiled (easy to debug with print or pdb); "cpu" compiles them with numba.
    backends = ["python", "cpu"] + (["cuda"] if cuda_available() else [])
    num_envs, num_steps = 64, 50
    episodes = assert_backends_agree(SPEC, backends, num_envs, num_steps, seed=0)
    for backend in backends[1:]:
        print(f"python and {backend} agree on {num_steps} steps x {num_envs} envs")
    env = fasttrain.make("catch", num_envs=num_envs, backend="cpu", seed=0)
    for _ in range(3):
        env.step(np.full(num_envs, STAY))
    print(f"{episodes} episodes ended; env 0 after three steps:")
    print(env.render(0))

    # 3. Train PPO on it (the learner reads the env buffers without copying).
    steps = budget()
    ppo = dict(
        total_timesteps=steps,
        num_envs=64,
        num_steps=16,
        num_minibatches=4,
        update_epochs=4,
        learning_rate=2.5e-3,
        ent_coef=0.01,
    )
    config = load(
        overrides={
            "game": {"name": "catch"},
            "run": {"device": "cpu", "seed": 0},
            "ppo": ppo,
            "model": {"hidden": 64},
            "log": {"progress": False},
        }
    )
    with tempfile.TemporaryDirectory() as out:
        summary = run(config, out=os.path.join(out, "catch-ppo"))
    # a random paddle catches about 1 ball in `cols`; a trained one nearly all (return near +1)
    print(f"PPO on catch: mean return {summary['episodic_return']:.2f} after {steps:,} steps")


if __name__ == "__main__":
    main()

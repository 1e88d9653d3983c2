"""Make the pictures of the README and the docs: train small policies with `fasttrain run`, then
write GIFs of them playing (`fasttrain play --gif`) and their learning curves (`fasttrain plot`).

    python docs/make_assets.py                  # everything: ~10 minutes on 2 idle CPU cores
    python docs/make_assets.py --only snake     # one game (and the README pictures it is in)
    python docs/make_assets.py --scale 0.001    # tiny budgets: checks the script in seconds

Runs go to runs/assets/<game> and are reused when present (delete one to train it again); the
pictures go to docs/assets/ (--out to change it). Every picture is a command anyone can rerun:
the script prints each one before running it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# game -> agent steps to train (0: random play), GIF steps and frames per second. The budgets are
# short of each game's default run: enough to show play that is clearly not random. A registered
# game without an entry gets RANDOM_PLAY.
RANDOM_PLAY = (0, 200, 10)
PLAN = {
    "snake": (12_000_000, 300, 15),
    "cartpole": (200_000, 200, 30),
    "arena": (3_000_000, 48, 10),  # 120 steps made a 420 KB GIF
    "minatar-breakout": (2_000_000, 300, 15),
    "minatar-asterix": (0, 200, 10),
    "minatar-freeway": (0, 200, 10),
    "minatar-space_invaders": (0, 200, 10),
    "minatar-seaquest": (0, 200, 10),
}
README_GAMES = ("snake", "minatar-breakout")  # side by side in agents.gif, overlaid in curves.png
SEED = 1  # the seed the GIFs are played with (training uses run.seed's default, 0)


def fasttrain(*args) -> None:
    """Run ``fasttrain ARGS`` from this checkout, printing the command first."""
    print("$ fasttrain " + shlex.join(map(str, args)), flush=True)
    subprocess.run([sys.executable, "-m", "fasttrain", *map(str, args)], cwd=ROOT, check=True)


def train(game: str, steps: int, runs: Path) -> Path | None:
    """The run directory of ``game`` trained for ``steps``, trained now unless it exists."""
    if steps == 0:
        return None
    out = runs / game
    if not (out / "summary.json").exists():
        fasttrain(
            "run", "--game", game, "--steps", steps, "--out", out, "--set", "log.interval_s=30"
        )
    return out


def agents_gif(runs: dict, out: Path, steps: int = 200, fps: float = 15, side: int = 192) -> None:
    """The README's GIF: the trained agents of ``README_GAMES`` side by side, one frame each
    per step (fasttrain.media, as `fasttrain play --gif` draws them), ``side`` pixels high."""
    import numpy as np

    import fasttrain
    from fasttrain.media import replay_frames, write_gif
    from fasttrain.run.checkpoint import load_agent

    columns = []
    for game in README_GAMES:
        act, params = load_agent(runs[game])
        env = fasttrain.make(game, num_envs=1, seed=SEED, **params)
        scale = max(1, round(side / max(env.render_rgb(0).shape[:2])))
        columns.append(replay_frames(env, steps, act, scale=scale))
    height = max(frames[0].shape[0] for frames in columns)
    gap = np.full((height, 8, 3), 255, np.uint8)

    def pad(frame):
        below = np.full((height - frame.shape[0], frame.shape[1], 3), 255, np.uint8)
        return np.concatenate([frame, below])

    frames = [
        np.concatenate([pad(columns[0][t]), gap, pad(columns[1][t])], axis=1)
        for t in range(steps + 1)
    ]
    write_gif(out, frames, fps)
    print(f"wrote {out}: {len(frames)} frames", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from fasttrain import games as registry

    names = registry.names()
    parser.add_argument("--only", choices=names, action="append", help="games to make")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the training budgets")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "assets")
    args = parser.parse_args()
    games = args.only or names
    (args.out / "games").mkdir(parents=True, exist_ok=True)
    runs = {}
    for game in games:
        steps, gif_steps, fps = PLAN.get(game, RANDOM_PLAY)
        run = train(game, max(1, round(steps * args.scale)) if steps else 0, args.runs)
        runs[game] = run
        gif = args.out / "games" / f"{game}.gif"
        who = ["--checkpoint", run] if run else ["--policy", "random"]
        fasttrain(
            "play",
            "--game",
            game,
            *who,
            "--steps",
            gif_steps,
            "--fps",
            fps,
            "--seed",
            SEED,
            "--gif",
            gif,
        )
    if all(game in runs for game in README_GAMES):
        agents_gif(runs, args.out / "agents.gif")
        dirs = [runs[game] for game in README_GAMES]
        fasttrain(
            "plot", *dirs, "--x", "time", "--y", "charts/score", "--out", args.out / "curves.png"
        )
    for path in sorted(args.out.rglob("*.*")):
        if path.suffix in (".gif", ".png"):
            print(f"{path}: {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()

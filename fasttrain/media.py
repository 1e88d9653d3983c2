"""Replays: colour frames of one environment and animated GIFs of them (extra ``media``), and
text frames played in a terminal (``fasttrain play``).

>>> import fasttrain
>>> from fasttrain.media import replay_frames, write_gif
>>> env = fasttrain.make("snake", num_envs=1, seed=0)
>>> write_gif("snake.gif", replay_frames(env, steps=200), fps=15)

Frames come from the game's ``render_rgb`` (one pixel per cell for grid games), scaled up by
whole pixels so the picture is about 256 pixels on its longer side. Pillow writes the GIF;
every frame has few colours, so the GIF holds them exactly (a GIF palette has 256).
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import numpy as np

from fasttrain.errors import ConfigError
from fasttrain.run.rundir import check_output_file, write_atomic

TARGET_SIDE = 256  # pixels on the longer side of an upscaled frame (at least)
# a GIF's frames stay in memory until it is written (Pillow keeps every frame too): ~0.3 MB a
# step at TARGET_SIDE, so this caps a replay near 2 GB
MAX_GIF_STEPS = 5_000


def check_gif_steps(steps: int, where: str = "--steps") -> None:
    """One line for a replay longer than ``MAX_GIF_STEPS``, before any frame is made."""
    if steps > MAX_GIF_STEPS:
        raise ConfigError(
            f"{where} {steps:,}: a GIF holds at most {MAX_GIF_STEPS:,} steps (its frames are "
            "kept in memory until it is written)"
        )


def scale_for(shape) -> int:
    """The whole-pixel scale that brings a frame's longer side to about ``TARGET_SIDE``."""
    return max(1, round(TARGET_SIDE / max(shape[0], shape[1])))


def upscale(frame: np.ndarray, scale: int) -> np.ndarray:
    """Each pixel of ``frame`` (H, W, 3) as a ``scale`` x ``scale`` block (nearest neighbour)."""
    if scale == 1:
        return np.ascontiguousarray(frame)
    return np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)


def _pil_image():
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("GIF replays need Pillow: pip install 'fasttrain[media]'") from None
    return Image


def check_media() -> None:
    """Pillow is importable (else one line naming the extra), before any work."""
    _pil_image()


def replay_frames(env, steps: int, act=None, generator=None, scale: int | None = None) -> list:
    """Frames of environment 0 of ``env`` (a ``fasttrain.VecEnv``): the current state, then one
    frame after each of ``steps`` steps (``steps + 1`` frames), each upscaled by ``scale``
    (default: ``scale_for``). Actions: uniformly random for every row (seeded by
    ``generator``), or ``act`` (an ``obs -> actions`` callable such as a trained agent; a
    recurrent one gets the episode starts). Episodes restart inside the step as in training."""
    import torch

    from fasttrain.evaluate import choose

    if env.spec.render_rgb is None:
        raise ConfigError(f"game {env.game!r} has no colour pictures (render_rgb)")
    check_gif_steps(steps, "a replay of")
    first = env.render_rgb(0)
    scale = scale or scale_for(first.shape)
    frames = [upscale(first, scale)]
    episode_starts = None
    with torch.inference_mode():
        for _ in range(steps):
            if act is None:
                actions = torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)
            else:
                actions = choose(act, env.obs, episode_starts)
            env.step(actions)
            episode_starts = env.terminated | env.truncated
            frames.append(upscale(env.render_rgb(0), scale))
    return frames


def play_in_terminal(env, game: str, steps: int, fps: float, act, generator, echo=print) -> None:
    """``steps`` steps of environment 0 as text frames with a status line (``fasttrain play``):
    redrawn in place at ``fps`` on a terminal, one after another otherwise (a pipe, a file)."""
    import torch

    from fasttrain.evaluate import choose

    interactive = sys.stdout.isatty()
    # with several agents the frame shows the whole world; the status follows agent 0
    who = "" if env.num_agents == 1 else f"agent 0 of {env.num_agents}  "
    total, episode, lives = 0.0, 1, 0
    episode_starts = None
    for step in range(steps + 1):
        frame = env.render(0)
        status = f"{game}  {who}episode {episode}  step {step}  return {total:+.2f}"
        if env.num_agents > 1:
            status += f"  lives ended (all agents) {lives}"
        if interactive:
            echo("\x1b[H\x1b[2J" + frame + "\n" + status)
            if fps > 0:
                time.sleep(1.0 / fps)
        else:
            echo(frame + "\n" + status + "\n")
        if step == steps:
            break
        if act is None:
            actions = torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)
        else:  # a recurrent actor's memory restarts with each episode
            actions = choose(act, env.obs, episode_starts)
        _, reward, terminated, truncated = env.step(actions)
        episode_starts = terminated | truncated
        lives += int((terminated | truncated).sum())
        total += float(reward[0])
        if bool(terminated[0] | truncated[0]):
            end = "died or won" if bool(terminated[0]) else "time limit"
            echo(f"episode {episode} ended ({end}): return {total:+.2f}")
            total, episode = 0.0, episode + 1


def frame_ms(fps: float) -> int:
    """Milliseconds per GIF frame at ``fps``: GIF counts hundredths of a second, so the time is
    rounded to 10 ms (at least 10)."""
    return max(1, round(100.0 / fps)) * 10


def write_gif(path, frames, fps: float = 10.0) -> Path:
    """An animated GIF of ``frames`` (uint8 (H, W, 3), all one size) at ``fps``, looping; written
    atomically (a temp file in the same folder, then a rename). Pillow merges a frame identical
    to the one before into it (their times add up), so a still scene takes one frame."""
    if fps <= 0:
        raise ConfigError(f"fps must be > 0 for a GIF, got {fps}")
    if not frames:
        raise ConfigError("a GIF needs at least one frame")
    path = check_output_file(path)
    Image = _pil_image()
    images = (Image.fromarray(np.asarray(f, dtype=np.uint8), mode="RGB") for f in frames)
    buffer = io.BytesIO()
    next(images).save(  # the rest one at a time: Pillow keeps its own palette copy of each
        buffer,
        format="GIF",
        save_all=True,
        append_images=images,
        duration=frame_ms(fps),
        loop=0,
        optimize=False,
        disposal=1,
    )
    write_atomic(path, buffer.getbuffer())
    return path

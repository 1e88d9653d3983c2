"""Replays: GIFs of one environment from the CLI and at a run's end; one-line refusals."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain import media
from fasttrain.cli import main
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError
from fasttrain.run.runner import REPLAY_FPS, run

Image = pytest.importorskip("PIL.Image")
ImageSequence = pytest.importorskip("PIL.ImageSequence")


def gif_frames(path):
    with Image.open(path) as image:
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(image)]
        durations = [f.info["duration"] for f in ImageSequence.Iterator(Image.open(path))]
    return frames, durations


def test_play_gif_has_every_step_and_starts_at_the_start_state(tmp_path):
    out = tmp_path / "snake.gif"
    args = ["play", "--game", "snake", "--gif", str(out), "--steps", "30", "--fps", "20"]
    result = CliRunner().invoke(main, [*args, "--seed", "3"])
    assert result.exit_code == 0, result.output
    frames, durations = gif_frames(out)
    start = fasttrain.make("snake", num_envs=1, backend="cpu", seed=3).render_rgb(0)
    scale = media.scale_for(start.shape)
    # the snake moves every step, so no two frames in a row are alike (Pillow merges those)
    assert len(frames) == 31 and durations == [50] * 31
    assert frames[0].shape == (12 * scale, 12 * scale, 3)
    assert np.array_equal(frames[0], media.upscale(start, scale))  # exact colours
    assert f"31 frames of {12 * scale}x{12 * scale}" in result.output


def test_replay_frames_follow_the_environment(tmp_path):
    env = fasttrain.make("minatar-breakout", num_envs=1, backend="cpu", seed=1)
    twin = fasttrain.make("minatar-breakout", num_envs=1, backend="cpu", seed=1)
    frames = media.replay_frames(env, 12, act=lambda obs: torch.full((1,), 2), scale=3)
    assert len(frames) == 13 and frames[0].shape == (30, 30, 3)
    for frame in frames[1:]:
        twin.step(torch.full((1,), 2))
        assert np.array_equal(frame, media.upscale(twin.render_rgb(0), 3))
    path = media.write_gif(tmp_path / "b.gif", frames, fps=10)
    read, durations = gif_frames(path)
    assert np.array_equal(read[0], frames[0])
    assert sum(durations) == 13 * 100  # merged identical frames keep their time
    assert not list(tmp_path.glob(".b.gif*"))


def test_a_run_writes_its_replay(tmp_path):
    config = cfg.from_dict(
        {
            "game": {
                "name": "cartpole",
                "cartpole": {"ppo": {"total_timesteps": 1024, "num_envs": 16, "num_steps": 16}},
            },
            "model": {"hidden": 16},
            "log": {"progress": False, "curves": False, "replay": True, "replay_steps": 25},
        }
    )
    lines = []
    run(config, out=tmp_path / "run", echo=lines.append)
    frames, durations = gif_frames(tmp_path / "run" / "replay.gif")
    assert sum(durations) == 26 * media.frame_ms(REPLAY_FPS)
    assert frames[0].shape == (60 * 3, 96 * 3, 3)
    assert any("replay.gif (26 frames)" in line for line in lines)


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--fps", "0"], "a GIF needs --fps > 0"),
        (["--gif", "{tmp}/missing/x.gif"], "does not exist"),
    ],
)
def test_bad_gif_input_is_one_line(tmp_path, extra, words):
    args = ["play", "--game", "snake", "--gif", str(tmp_path / "x.gif")]
    args += [a.format(tmp=tmp_path) for a in extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and words in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.gif").exists()


def test_write_gif_refusals(tmp_path):
    with pytest.raises(ConfigError, match="fps must be > 0"):
        media.write_gif(tmp_path / "x.gif", [np.zeros((2, 2, 3), np.uint8)], fps=0)
    with pytest.raises(ConfigError, match="at least one frame"):
        media.write_gif(tmp_path / "x.gif", [], fps=5)

"""CLI smoke runs in a subprocess: ``fasttrain games`` and ``fasttrain play``."""

from __future__ import annotations

import re
import subprocess
import sys

from fasttrain import games


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fasttrain.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_games_lists_every_registered_game():
    result = _cli("games")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "observation", "actions", "agents"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert sorted(rows) == games.names()
    assert rows["snake"] == ["uint8", "4x12x12", "4", "1"]  # default 12x12 board, 4 channels


def _frames(stdout):
    """(episode, step, board rows) for every frame printed by ``play``."""
    lines = stdout.splitlines()
    frames = []
    for k, line in enumerate(lines):
        match = re.match(r"snake  episode (\d+)  step (\d+)  return ", line)
        if match:
            bottom = k - 1  # the frame's lower border is right above its status line
            top = max(j for j in range(bottom) if lines[j].startswith("+"))
            frames.append((int(match[1]), int(match[2]), lines[top + 1 : bottom]))
    return frames


def test_play_random_shows_a_moving_snake():
    result = _cli("play", "--game", "snake", "--policy", "random", "--steps", "50", "--seed", "3")
    assert result.returncode == 0, result.stderr
    frames = _frames(result.stdout)
    assert [step for _, step, _ in frames] == list(range(51))
    heads = []
    for _, _, rows in frames:
        assert len(rows) == 12 and all(len(row) == 14 for row in rows)
        board = "".join(rows)
        assert board.count("@") == 1 and board.count("*") <= 1
        r = next(r for r, row in enumerate(rows) if "@" in row)
        heads.append((r, rows[r].index("@") - 1))
    moves = 0
    for (e0, _, _), (e1, _, _), a, b in zip(frames, frames[1:], heads, heads[1:], strict=False):
        if e0 == e1:  # within an episode the head moves one cell per step
            assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
            moves += 1
    assert moves >= 25
    ended = len(re.findall(r"^episode \d+ ended", result.stdout, flags=re.M))
    assert frames[-1][0] == 1 + ended


def test_play_unknown_game_lists_valid_games():
    result = _cli("play", "--game", "snek", "--steps", "1")
    assert result.returncode != 0
    assert "snek" in result.stderr and "snake" in result.stderr

"""CLI smoke runs: ``fasttrain games`` (in a subprocess, as a user runs the command) and
``fasttrain play`` (in this process, through click's runner: the frames it prints)."""

from __future__ import annotations

import re

import numpy as np
import torch

import fasttrain
from fasttrain import games
from tests.cli import cli, cli_in_process


def test_games_lists_every_registered_game():
    result = cli("games")
    assert result.returncode == 0, result.stderr
    table, backends = result.stdout.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["name", "observation", "actions", "agents"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert sorted(rows) == games.names()
    assert rows["snake"] == ["uint8", "4x12x12", "4", "1"]  # default 12x12 board, 4 channels
    # which backends this machine runs, and why not cuda (no GPU here)
    from fasttrain.kernels.gpu import cuda_problem

    problem = cuda_problem()
    assert backends.strip() == (
        "backends on this machine: python, cpu"
        + (", cuda" if problem is None else f"; not cuda: {problem}")
    )


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
    result = cli_in_process(
        "play", "--game", "snake", "--policy", "random", "--steps", "50", "--seed", "3"
    )
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
    result = cli_in_process("play", "--game", "snek", "--steps", "1")
    assert result.returncode != 0
    assert "snek" in result.stderr and "snake" in result.stderr


# ------------------------------------------------------------------------------- the arena

ARENA_STATUS = re.compile(
    r"arena  agent 0 of 8  episode (\d+)  step (\d+)  return ([+-]\d+\.\d\d)  "
    r"lives ended \(all agents\) (\d+)$"
)


def test_games_lists_the_arena_with_agents_as_a_param():
    result = cli_in_process("games")
    assert result.returncode == 0, result.stderr
    rows = {
        row[0]: row[1:] for row in (re.split(r"\s{2,}", ln) for ln in result.stdout.splitlines())
    }
    assert rows["arena"] == ["uint8 7x7", "4", "8 (a param)"]  # vision 3: a 7x7 window
    assert rows["snake"][-1] == "1" and rows["cartpole"][-1] == "1"


def test_play_random_arena_shows_the_whole_map_and_counts_every_life():
    steps, seed = 40, 2
    result = cli_in_process("play", "--game", "arena", "--steps", str(steps), "--seed", str(seed))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    status = [(k, ARENA_STATUS.match(line)) for k, line in enumerate(lines)]
    status = [(k, m) for k, m in status if m]
    assert [int(m[2]) for _, m in status] == list(range(steps + 1))
    for k, _ in status:
        rows = lines[k - 24 : k]  # the default 24x24 map, right above its status line
        assert all(len(row) == 24 for row in rows)
        assert rows[:3] == ["#" * 24] * 3 and rows[-3:] == ["#" * 24] * 3  # vision 3: the wall
        assert all(row[:3] == "###" and row[-3:] == "###" for row in rows)
        inside = "".join(row[3:-3] for row in rows[3:-3])
        assert set(inside) <= set(".*xABCDEFGHabcdefgh")
        assert sorted(c for c in inside if c.isupper()) == list("ABCDEFGH")  # 8 heads
        assert inside.count("*") == 16  # num_food stays constant
        assert k < 25 or lines[k - 25] == "" or lines[k - 25].startswith("episode ")
    # agent 0's episodes, return and every agent's ended lives, as a twin env counts them
    env = fasttrain.make("arena", num_envs=1, backend="cpu", seed=seed)
    generator = torch.Generator().manual_seed(seed)
    total, episode, lives, ends = 0.0, 1, 0, []
    for step in range(1, steps + 1):
        _, reward, terminated, truncated = env.step(
            torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)
        )
        lives += int((terminated | truncated).sum())
        total += float(reward[0])
        if bool(terminated[0]):  # the frame after a death shows the next episode
            ends.append(f"episode {episode} ended (died or won): return {total:+.2f}")
            total, episode = 0.0, episode + 1
        _, m = status[step]
        assert (int(m[1]), float(m[3]), int(m[4])) == (episode, round(total, 2), lives), step
    assert ends and lives > len(ends)  # agent 0 died, and so did others
    assert int(status[-1][1][4]) == lives
    assert [ln for ln in lines if ln.startswith("episode ")] == ends


def test_arena_render_crops_a_large_map_around_snake_0():
    for seed in (0, 1):
        env = fasttrain.make("arena", num_envs=1, backend="cpu", seed=seed, width=80, height=60)
        *rows, note = env.render(0).splitlines()
        assert len(rows) == 48 and all(len(row) == 48 for row in rows)
        match = re.fullmatch(
            r"\(rows (\d+)-(\d+), columns (\d+)-(\d+) of 60x80, around snake 0\)", note
        )
        assert match, note
        r0, r1, c0, c1 = (int(g) for g in match.groups())
        assert (r1 - r0, c1 - c0) == (47, 47) and 0 <= r0 and r1 <= 59 and 0 <= c0 and c1 <= 79
        head_r, head_c = divmod(int(env.state["head"][0][0]), 80)
        assert rows[head_r - r0][head_c - c0] == "A"  # snake 0's head is inside the crop
        grid = np.asarray(env.state["grid"][0]).reshape(60, 80)
        walls = grid[r0 : r1 + 1, c0 : c1 + 1] == 3
        assert (np.array([list(row) for row in rows]) == "#").tolist() == walls.tolist()
    small = fasttrain.make("arena", num_envs=1, backend="cpu", seed=0).render(0).splitlines()
    assert len(small) == 24 and "around snake 0" not in small[-1]  # the default map: no crop


def test_play_a_checkpoint_without_game_plays_the_runs_game(tmp_path):
    """`fasttrain play --checkpoint DIR` plays the game DIR was trained on (it used to assume
    snake and refuse every other run)."""
    out = tmp_path / "cartpole"
    trained = cli_in_process(
        "run", "--game", "cartpole", "--steps", "64", "--num-envs", "4", "--out", str(out)
    )
    assert trained.returncode == 0, trained.stderr
    played = cli_in_process("play", "--checkpoint", str(out), "--steps", "3", "--fps", "0")
    assert played.returncode == 0, played.stderr
    assert re.search(r"^cartpole  episode 1  step 3  return ", played.stdout, flags=re.M)
    snake = cli_in_process("play", "--game", "snake", "--checkpoint", str(out), "--steps", "3")
    assert snake.returncode == 1
    assert snake.stderr.strip() == "Error: checkpoint was trained on 'cartpole', not 'snake'"

"""Curriculum: stages in config (checked in one line), the promotion rule, the env changing in
place between iterations, metrics.csv's stage column, and resume bit for bit mid-curriculum."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain import games
from fasttrain.cli import main
from fasttrain.config import file as configfile
from fasttrain.config import resolve as cfg
from fasttrain.config.curriculum import Curriculum, Stage
from fasttrain.errors import ConfigError
from fasttrain.kernels import get_backend
from fasttrain.learners import LEARNERS
from fasttrain.run import checkpoint
from fasttrain.run.runner import STAGE_COLUMN, run
from tests.cli import ROOT, cli_in_process, header

# a small arena with room for two bots (none active unless a stage says so)
ARENA = dict(width=12, height=12, num_snakes=2, num_food=4, vision=2, max_bots=2)
ARENA_TOML = "[game]\nname = 'arena'\n[game.arena]\n" + "".join(
    f"{k} = {v}\n" for k, v in ARENA.items()
)
BOTS = {"num_bots": 2, "bot_policy": "random"}


def quiet(*_):
    pass


def arena_config(
    steps: int, stages: list[dict], algo: str = "ppo", log=None, run=None, arena=None
) -> cfg.Config:
    """Learner ``algo`` with its smoke settings on the small arena (or ``arena``), with
    ``stages``."""
    return cfg.from_dict(
        {
            "run": {"algo": algo, "device": "cpu", "torch_threads": 1, "numba_threads": 1}
            | (run or {}),
            "game": {"name": "arena", "arena": arena or ARENA},
            algo: {**LEARNERS[algo].smoke, "total_timesteps": steps},
            "model": {"hidden": 32},
            "log": {"progress": False, "interval_s": 1e-9} | (log or {}),
            "curriculum": {"stage": stages},
        }
    )


def iteration_steps(algo: str = "ppo") -> int:
    """Agent steps per iteration of ``algo``'s smoke settings on the arena."""
    return (
        LEARNERS[algo].smoke["num_envs"] * ARENA["num_snakes"] * LEARNERS[algo].smoke["num_steps"]
    )


def rows(out: Path) -> list[dict]:
    return list(csv.DictReader(open(out / "metrics.csv")))


def timeless(table: list[dict]) -> list[dict]:
    """metrics.csv rows without the columns that depend on timing."""
    return [{k: v for k, v in row.items() if not k.startswith(("time", "sps"))} for row in table]


def stages_column(out: Path) -> list[int]:
    return [int(row[STAGE_COLUMN]) for row in rows(out)]


# ------------------------------------------------------------------------------- config


def test_stages_parse_render_and_read_back():
    text = ARENA_TOML + (
        "[[curriculum.stage]]\nparams = { num_bots = 1, bot_policy = 'random' }\n"
        "promote_at = 3\n"  # an int where a float goes
        "[[curriculum.stage]]\nparams = { num_bots = 2, reward_food = 1 }\n"
        "promote_metric = 'charts/episodic_length'\n"
    )
    config = cfg.from_dict(tomllib.loads(text))
    first, last = config.curriculum
    assert first == Stage({"num_bots": 1, "bot_policy": "random"}, "charts/score", 3.0, 100, 0)
    assert last.promote_at is None and last.promote_metric == "charts/episodic_length"
    params = config.stage_params(1)  # on top of [game.arena], not of stage 1
    assert (params.num_bots, params.bot_policy, params.num_food) == (2, "greedy", 4)
    assert type(params.reward_food) is float  # one argument type in every stage
    assert "curriculum=2 stages (config)" in config.overrides()
    again = cfg.from_dict(tomllib.loads(configfile.to_toml(config, configfile.CONFIG_HEADER)))
    assert again.curriculum == config.curriculum  # what --resume reads back
    assert "[[curriculum.stage]]" not in configfile.to_toml(cfg.defaults())


def test_a_later_layer_replaces_the_whole_curriculum(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        ARENA_TOML + "[[curriculum.stage]]\nparams = { num_bots = 1 }\npromote_at = 1.0\n"
        "[[curriculum.stage]]\nparams = { num_bots = 2 }\n"
    )
    assert len(cfg.load(path).curriculum) == 2
    config = cfg.load(path, sets=["curriculum.stage=[{params={bot_policy='cautious'}}]"])
    assert config.curriculum == (Stage({"bot_policy": "cautious"}),)
    assert cfg.load(path, sets=["curriculum.stage=[]"]).curriculum == ()
    assert cfg.load(sets=["game.name=arena"]).curriculum == ()


def stage_tables(*stages: str) -> str:
    return "".join(f"[[curriculum.stage]]\n{body}\n" for body in stages)


BAD = [
    (
        stage_tables("params = { num_bots = 1 }\npromote_after = 1.0", "params = { num_bots = 2 }"),
        ["unknown key 'promote_after' in curriculum stage 1", "params, promote_metric, promote_at"],
    ),
    (
        stage_tables("params = { num_bot = 1 }\npromote_at = 1.0", "params = { num_bots = 2 }"),
        ["curriculum stage 1: unknown arena parameter 'num_bot'", "num_bots", "bot_policy"],
    ),
    (
        stage_tables("params = { num_bots = 1 }\npromote_at = 1.0", "params = { max_bots = 4 }"),
        ["curriculum stage 2", "parameter 'max_bots' sets buffer shapes", "[game.arena]"],
    ),
    (
        stage_tables("params = { vision = 3 }"),
        ["curriculum stage 1", "parameter 'vision' sets buffer shapes"],
    ),
    (
        stage_tables("params = { num_bots = 1 }\npromote_at = 1.0", "params = { num_bots = 3 }"),
        ["curriculum stage 2", "num_bots must be in 0..max_bots = 2, got 3"],
    ),
    (
        stage_tables("params = { bot_policy = 'smart' }"),
        ["curriculum stage 1", "random, greedy, cautious", "'smart'"],
    ),
    (
        stage_tables("params = { num_bots = 1.5 }"),
        ["curriculum stage 1", "'num_bots' must be int"],
    ),
    (
        stage_tables("params = { num_bots = 1 }", "params = { num_bots = 2 }"),
        ["curriculum stage 1 needs promote_at"],
    ),
    (
        stage_tables(
            "params = { num_bots = 1 }\npromote_at = 1.0",
            "params = { num_bots = 2 }\npromote_at = 2.0",
        ),
        ["curriculum stage 2 is the last stage", "no promote_at"],
    ),
    (
        stage_tables("params = { num_bots = 1 }\npromote_at = 1.0"),
        ["curriculum stage 1 is the last stage"],
    ),
    (
        stage_tables(
            "params = { num_bots = 1 }\npromote_at = 1.0\npromote_metric = 'charts/reward'",
            "params = { num_bots = 2 }",
        ),
        [
            "curriculum stage 1 promote_metric must be one of charts/score, "
            "charts/episodic_return, charts/episodic_length",
            "'charts/reward'",
        ],
    ),
    (
        stage_tables(
            "params = { num_bots = 1 }\npromote_at = 1.0\npromote_episodes = 0",
            "params = { num_bots = 2 }",
        ),
        ["curriculum stage 1 promote_episodes must be >= 1, got 0"],
    ),
    (
        stage_tables(
            "params = { num_bots = 1 }\npromote_at = 1.0\nmin_steps = -1",
            "params = { num_bots = 2 }",
        ),
        ["curriculum stage 1 min_steps must be >= 0, got -1"],
    ),
    (
        # num_food = 4 is [game.arena]'s value already: stage 2's params equal stage 1's
        stage_tables(
            "params = { num_bots = 2 }\npromote_at = 1.0", "params = { num_bots = 2, num_food = 4 }"
        ),
        ["curriculum stage 2 changes nothing from stage 1"],
    ),
    (
        stage_tables("params = 2\npromote_at = 1.0", "params = { num_bots = 2 }"),
        ["curriculum stage 1 params must be a table"],
    ),
    (
        stage_tables("params = { num_bots = 1 }\npromote_at = 'high'", "params = { num_bots = 2 }"),
        ["curriculum stage 1 promote_at must be float"],
    ),
    ("[curriculum]\nstages = 1\n", ["unknown key 'stages' in [curriculum]; valid: stage"]),
    ("[curriculum]\nstage = 3\n", ["curriculum.stage must be an array of tables"]),
]


@pytest.mark.parametrize("stages, words", BAD, ids=[words[0][:48] for _, words in BAD])
def test_bad_curriculum_fails_in_one_line(stages, words, tmp_path):
    with pytest.raises(ConfigError) as info:
        cfg.from_dict(tomllib.loads(ARENA_TOML + stages))
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message
    # and on the command line: exit 1, the same line, no run directory
    path, out = tmp_path / "bad.toml", tmp_path / "run"
    path.write_text(ARENA_TOML + stages)
    result = CliRunner().invoke(main, ["run", "--config", str(path), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {message}"
    assert not out.exists()


@pytest.mark.parametrize("case", [2, 7])  # a shape-changing param; promote_at missing
def test_bad_curriculum_on_the_command_line_is_one_line_before_any_work(case, tmp_path):
    stages, words = BAD[case]
    path, out = tmp_path / "bad.toml", tmp_path / "run"
    path.write_text(ARENA_TOML + stages)
    result = cli_in_process("run", "--config", path, "--out", out, "--device", "cpu")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and all(word in lines[0] for word in words), result.stderr
    assert not out.exists()  # refused before any work


# ------------------------------------------------------------------------------- the rule


def small_env():
    return fasttrain.make("arena", num_envs=2, backend="python", seed=0, **ARENA)


def batch(mean: float, episodes: int) -> dict:
    """An ``env.stats()`` result whose every mean is ``mean``."""
    return {"return": mean, "length": mean, "score": mean, "episodes": episodes}


def test_window_covers_the_fewest_recent_batches_with_enough_episodes():
    env = small_env()
    stages = (
        Stage({"num_bots": 1}, promote_at=3.5, promote_episodes=10),
        Stage({"num_bots": 2}),
    )
    curriculum = Curriculum(stages, env)
    curriculum.apply()
    assert env.params.num_bots == 1
    assert curriculum.update(batch(9.0, 4), 100) is None  # 4 episodes of 10
    assert curriculum.update({}, 200) is None  # no episode ended: the window stays
    assert curriculum.update(batch(1.0, 4), 300) is None  # a mean of 5 over 8 of 10 episodes
    # 16 episodes: the newest two batches hold 12 >= 10 without the first, which drops out:
    # (1*4 + 3*8) / 12 = 2.33 < 3.5 (all 16 would give 4.0)
    assert curriculum.update(batch(3.0, 8), 400) is None
    assert curriculum.window() == ((1.0 * 4 + 3.0 * 8) / 12, 12)
    promotion = curriculum.update(batch(5.0, 4), 500)  # (3*8 + 5*4) / 12 = 3.67
    assert promotion is not None and promotion.value == (3.0 * 8 + 5.0 * 4) / 12
    assert (curriculum.stage, env.params.num_bots) == (1, 2)
    assert curriculum.update(batch(9.0, 99), 600) is None  # the last stage: no more promotions
    assert curriculum.stage == 1


def test_promotion_reads_the_stage_metric_and_waits_for_min_steps():
    env = small_env()
    stages = (
        Stage({"num_bots": 1}, "charts/episodic_length", 5.0, promote_episodes=3, min_steps=300),
        Stage({"num_bots": 2, "bot_policy": "cautious"}, promote_at=0.5, promote_episodes=2),
        Stage({"num_bots": 0}),
    )
    curriculum = Curriculum(stages, env, start_step=100)
    curriculum.apply()
    low = {"return": 9.0, "length": 1.0, "score": 9.0, "episodes": 2}
    assert curriculum.update(low, 200) is None  # the length is low (return and score are not)
    high = {"return": -9.0, "length": 9.0, "score": -9.0, "episodes": 2}
    # window of the last 4 episodes: (2 + 18) / 4 = 5.0 >= 5.0, but 300 - 100 < min_steps
    assert curriculum.update(high, 300) is None
    assert curriculum.window() == (5.0, 4)
    assert curriculum.update({}, 399) is None  # 299 steps in the stage
    promotion = curriculum.update({}, 400)
    assert promotion is not None and promotion.stage == 1
    assert str(promotion) == "curriculum: stage 2/3 at step 400 (charts/episodic_length 5 >= 5)"
    assert (env.params.num_bots, env.params.bot_policy) == (2, "cautious")
    mean, count = curriculum.window()
    assert math.isnan(mean) and count == 0  # a fresh window
    # stage 2 on charts/score: the batch of 3 covers promote_episodes = 2 by itself
    assert curriculum.update(batch(0.4, 3), 500) is None
    assert curriculum.update(batch(0.6, 1), 600) is None  # (0.4*3 + 0.6) / 4 = 0.45
    # now the newest two batches hold 2+ episodes without the first: (0.6 + 0.6) / 2
    promotion = curriculum.update(batch(0.6, 1), 700)
    assert promotion is not None and (promotion.stage, promotion.value) == (2, 0.6)
    assert env.params.num_bots == 0 and env.params.bot_policy == "greedy"  # the base's


def test_state_dict_continues_the_window_and_refuses_a_stage_it_lacks():
    stages = (
        Stage({"num_bots": 1}, promote_at=2.0, promote_episodes=6, min_steps=50),
        Stage({"num_bots": 2}),
    )
    a = Curriculum(stages, small_env())
    a.apply()
    a.update(batch(3.0, 2), 100)
    a.update(batch(1.0, 2), 200)
    env = small_env()
    b = Curriculum(stages, env)
    b.load_state_dict(a.state_dict())
    assert env.params.num_bots == 1  # the saved stage's params are applied
    # (3*2 + 1*2 + 2.5*2) / 6 = 2.17: both promote on the same batch, with the old ones counted
    assert a.update(batch(2.5, 2), 300) is not None
    assert b.update(batch(2.5, 2), 300) is not None
    assert a.state_dict() == b.state_dict() and env.params.num_bots == 2
    state = {**a.state_dict(), "stage": 2, "num_stages": 3}
    with pytest.raises(ConfigError, match=r"^checkpoint is in curriculum stage 3 of 3; this run"):
        Curriculum(stages, small_env()).load_state_dict(state)


# ------------------------------------------------------------------------------- runs


def recording(monkeypatch, algo: str = "ppo") -> list:
    """Trainers ``run`` makes for ``algo`` from now on, appended to the returned list."""
    made = []
    base = LEARNERS[algo].trainer

    class Recorder(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setitem(LEARNERS, algo, dataclasses.replace(LEARNERS[algo], trainer=Recorder))
    return made


def test_promotion_on_the_metric_changes_the_env_in_place(tmp_path, monkeypatch):
    """Stage 1 is the base game (no bots); a twin run without a curriculum gives, row by row,
    the episode lengths the rule sees, so the promotion's iteration is known in advance."""
    iterations = 8
    steps = iterations * iteration_steps()
    twin = tmp_path / "twin"
    run(arena_config(steps, []), out=twin, echo=quiet)
    assert STAGE_COLUMN not in rows(twin)[0]  # no column without a curriculum
    lengths = [float(row["charts/episodic_length"]) for row in rows(twin)]
    assert not any(math.isnan(x) for x in lengths)  # every iteration ended episodes
    # promote_episodes = 1: the window is the newest iteration that ended an episode, so the
    # first iteration k whose mean length beats every earlier one promotes at a threshold
    # between the two
    k = next(i for i in range(1, iterations - 1) if lengths[i] > max(lengths[:i]))
    threshold = (lengths[k] + max(lengths[:k])) / 2
    stages = [
        {
            "params": {},
            "promote_metric": "charts/episodic_length",
            "promote_at": threshold,
            "promote_episodes": 1,
        },
        {"params": BOTS},
    ]
    made = recording(monkeypatch)
    seen = []  # per metrics row: num_bots, bot slot lengths, buffer addresses, compiled count
    launchers = get_backend("cpu").compile(games.get("arena"))

    def on_row(row):
        env = made[0].env
        seen.append(
            {
                "num_bots": env.params.num_bots,
                "bot_lengths": env.state["length"][:, ARENA["num_snakes"] :].copy(),
                "addresses": {n: a.__array_interface__["data"][0] for n, a in env.arrays.items()},
                "arrays": dict(env.arrays),
                "obs": env.obs.data_ptr(),
                "compiled": launchers.num_compiled(),
            }
        )

    out = tmp_path / "curriculum"
    printed = []
    summary = run(arena_config(steps, stages), out=out, echo=printed.append, on_row=on_row)
    # rows 1..k+1 played stage 1, exactly as the twin did; the rest stage 2
    assert stages_column(out) == [1] * (k + 1) + [2] * (iterations - k - 1)
    table = timeless(rows(out))
    for row in table:
        assert row.pop(STAGE_COLUMN)
    assert table[: k + 1] == timeless(rows(twin))[: k + 1]
    assert table[k + 1 :] != timeless(rows(twin))[k + 1 :]
    step = (k + 1) * iteration_steps()
    assert f"curriculum: stage 2/2 at step {step:,} (charts/episodic_length " in "\n".join(printed)
    assert any(line.startswith("step") and "| stage 2/2 |" in line for line in printed)
    assert summary["curriculum_stage"] == 2 and summary["curriculum_stages"] == 2
    assert json.loads((out / "summary.json").read_text())["curriculum_stage"] == 2
    # the env: bots appear only after the promotion (row k+1 is read after it, before a step)
    assert [s["num_bots"] for s in seen] == [0] * k + [2] * (iterations - k)
    assert all((s["bot_lengths"] == 0).all() for s in seen[: k + 1])
    assert all((s["bot_lengths"] > 0).any() for s in seen[k + 1 :])
    # in place: no compilation after the first iteration, the same buffers throughout
    assert {s["compiled"] for s in seen} == {seen[0]["compiled"]}
    assert {s["obs"] for s in seen} == {seen[0]["obs"]}
    for s in seen[1:]:
        assert s["addresses"] == seen[0]["addresses"]
        for name, array in s["arrays"].items():
            assert np.shares_memory(array, seen[0]["arrays"][name]), name


@pytest.mark.parametrize("algo", list(LEARNERS))
def test_min_steps_forces_the_promotion_iteration(algo, tmp_path, monkeypatch):
    size = iteration_steps(algo)
    stages = [
        # any mean promotes, but not before 2.5 iterations of steps: after iteration 3
        {
            "params": {"num_bots": 1},
            "promote_at": -1e9,
            "promote_episodes": 1,
            "min_steps": int(2.5 * size),
        },
        {"params": {"num_bots": 2, "bot_policy": "cautious"}},
    ]
    made = recording(monkeypatch, algo)
    out = tmp_path / algo
    run(arena_config(5 * size, stages, algo), out=out, echo=quiet)
    assert stages_column(out) == [1, 1, 1, 2, 2]
    assert (made[0].env.params.num_bots, made[0].env.params.bot_policy) == (2, "cautious")


THREE_STAGES = [
    {"params": {"num_bots": 1}, "promote_at": -1e9, "promote_episodes": 1, "min_steps": 1},
    # promoted after 4 iterations in the stage: its start must survive the resume
    {
        "params": {"num_bots": 2, "bot_policy": "random"},
        "promote_at": -1e9,
        "promote_episodes": 1,
        "min_steps": 4 * iteration_steps(),
    },
    {"params": {"num_bots": 2, "bot_policy": "greedy", "reward_food": 0.5}},
]


def assert_same_run(straight: Path, resumed: Path):
    assert timeless(rows(resumed)) == timeless(rows(straight))
    a, b = checkpoint.load(straight), checkpoint.load(resumed)
    assert a["global_step"] == b["global_step"] and a["curriculum"] == b["curriculum"]
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["env"]:
        assert np.array_equal(a["env"][key], b["env"][key]), key


def test_resume_in_stage_2_equals_a_straight_run(tmp_path):
    size = iteration_steps()
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    run(arena_config(8 * size, THREE_STAGES), out=straight, echo=quiet)
    assert stages_column(straight) == [1, 2, 2, 2, 2, 3, 3, 3]
    run(arena_config(4 * size, THREE_STAGES), out=halves, echo=quiet)
    assert stages_column(halves) == [1, 2, 2, 2]
    assert checkpoint.load(halves)["curriculum"]["stage"] == 1  # 0-based: stopped in stage 2
    # the command line's --resume: the curriculum comes back from the checkpoint's config
    result = CliRunner().invoke(main, ["run", "--resume", str(halves), "--steps", str(8 * size)])
    assert result.exit_code == 0, result.output
    assert "curriculum stage 2/3" in header(result.output)
    assert_same_run(straight, halves)
    # continuing with a curriculum that lacks the saved stage is refused in one line
    shorter = "curriculum.stage=[{params={num_bots=1}}]"
    args = ["run", "--resume", str(halves), "--steps", str(9 * size), "--set", shorter]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: checkpoint is in curriculum stage 3 of 3; this run's curriculum has 1 stage(s)"
    )


def test_resume_from_a_checkpoint_between_rows_equals_a_straight_run(tmp_path):
    """csv_every = 2 with a checkpoint every iteration: a run that dies after iteration 5
    resumes from a checkpoint holding iteration 5's episode batch, which row 6 still needs."""
    size = iteration_steps()
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    config = arena_config(
        8 * size, THREE_STAGES, log={"csv_every": 2}, run={"checkpoint_interval": 1}
    )
    run(config, out=straight, echo=quiet)
    assert stages_column(straight) == [2, 2, 3, 3]  # rows after iterations 2, 4, 6, 8

    def die_at_row_6(row):
        if row["global_step"] == 6 * size:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        run(config, out=broken, echo=quiet, on_row=die_at_row_6)
    state = checkpoint.load(broken)
    assert state["global_step"] == 5 * size and len(state["episode_batches"]) == 1
    run(config, resume=broken, echo=quiet)
    assert_same_run(straight, broken)


def test_the_shipped_arena_curriculum_loads_with_three_stages_ending_with_greedy_bots():
    path = ROOT / "examples" / "arena_curriculum.toml"
    config = cfg.load(path)
    assert config.game.name == "arena" and len(config.curriculum) >= 3
    stages = [config.stage_params(k) for k in range(len(config.curriculum))]
    assert [p.num_bots for p in stages] == sorted(p.num_bots for p in stages)
    assert stages[-1].bot_policy == "greedy" and stages[-1].num_bots == stages[-1].max_bots
    assert config.sources["game.arena.max_bots"] == "largest num_bots"  # the file leaves it out


def test_max_bots_left_unset_is_sized_for_the_largest_num_bots_of_the_stages(tmp_path):
    """The bot slots (a buffer shape) hold the most bots any stage asks for, not the default
    0 that refused every curriculum with bots; a value the user sets is kept and checked."""
    small = {k: v for k, v in ARENA.items() if k != "max_bots"}
    stages = [{"params": {"num_bots": 3}, "promote_at": 1.0}, {"params": {"num_bots": 1}}]
    config = cfg.from_dict(
        {"game": {"name": "arena", "arena": small}, "curriculum": {"stage": stages}}
    )
    assert config.params.max_bots == 3 and config.params.num_bots == 0
    assert "game.arena.max_bots=3 (largest num_bots)" in config.overrides()
    assert cfg.from_dict({"game": {"name": "arena", "arena": small}}).params.max_bots == 0
    kept = cfg.from_dict(
        {
            "game": {"name": "arena", "arena": {**small, "max_bots": 5}},
            "curriculum": {"stage": stages},
        }
    )
    assert kept.params.max_bots == 5
    with pytest.raises(ConfigError) as info:
        cfg.from_dict(
            {
                "game": {"name": "arena", "arena": {**small, "max_bots": 2}},
                "curriculum": {"stage": stages},
            },
        )
    assert str(info.value) == (
        "curriculum stage 1: arena num_bots must be in 0..max_bots = 2, got 3 (game.arena.max_bots "
        "= 2 is set; left unset it is sized for the largest num_bots)"
    )
    # and it trains, the three bots in their slots from the first step
    config = arena_config(iteration_steps(), [{"params": {"num_bots": 3}}], arena=small)
    summary = run(config, out=tmp_path / "run", echo=quiet)
    assert summary["global_step"] == iteration_steps()
    state = checkpoint.load(tmp_path / "run")
    assert state["env"]["bot_score"].shape[1] == 3  # (num_envs, max_bots)
    assert all(stage.promote_at is not None for stage in config.curriculum[:-1])
    assert config.curriculum[-1].promote_at is None

"""``fasttrain.evaluate`` against episodes tracked by hand, and ``fasttrain eval`` through the CLI.

An episode is one agent's life in the arena: its return, length and score are followed here
from the rewards and ends of a twin env stepped with the same seed and actions.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain.config import resolve as cfg
from fasttrain.evaluate import EvalResult, evaluate, table
from fasttrain.games import names
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.runner import run
from tests.cli import cli_in_process

# a small arena with reward for food and corpses, so every figure varies between lives
SMALL = {"width": 12, "height": 12, "num_snakes": 4, "num_food": 6, "vision": 2}
# the tiny trained run's world: not the defaults, so a random baseline must read them from it
RUN_PARAMS = {"width": 16, "height": 16, "num_snakes": 4, "num_food": 8}


@dataclass
class Episode:
    step: int  # the vectorised step (1-based) in which it ended
    row: int
    ret: float
    score: float
    length: int


def hand_tracked(params: dict, num_envs: int, seed: int, choose, steps: int) -> list[Episode]:
    """Every arena life that ends in ``steps`` steps of a twin env, in step then row order.

    ``choose(env, step)`` gives the actions. A life's score is the number of steps it was
    rewarded (food and corpse give reward > 0, nothing else does); for rows still alive the
    env's own running score must agree with that count.
    """
    env = fasttrain.make("arena", num_envs=num_envs, backend="cpu", seed=seed, **params)
    ret = [0.0] * env.num_rows
    score = [0] * env.num_rows
    length = [0] * env.num_rows
    episodes = []
    for step in range(1, steps + 1):
        _, rewards, terminated, truncated = env.step(choose(env, step))
        ended = (terminated | truncated).tolist()
        for row, reward in enumerate(rewards.tolist()):
            ret[row] += reward
            length[row] += 1
            score[row] += reward > 0
            if ended[row]:
                episodes.append(Episode(step, row, ret[row], float(score[row]), length[row]))
                ret[row], score[row], length[row] = 0.0, 0, 0
            else:
                assert env.arrays["score"][row] == score[row], (step, row)
    return episodes


def random_choice(seed: int):
    """The actions ``evaluate`` draws with ``act=None``: one seeded torch generator."""
    generator = torch.Generator().manual_seed(seed)

    def choose(env, step):
        return torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)

    return choose


def assert_matches(result: EvalResult, episodes: list[Episode]):
    assert result.episodes == len(episodes)
    for key, attr in (("return", "ret"), ("score", "score"), ("length", "length")):
        values = np.array([getattr(e, attr) for e in episodes], dtype=np.float64)
        assert getattr(result, f"{key}_mean") == pytest.approx(values.mean(), rel=1e-12), key
        assert getattr(result, f"{key}_std") == pytest.approx(values.std(), rel=1e-12), key


def strip_time(result: EvalResult) -> dict:
    return {k: v for k, v in result.as_dict().items() if k != "seconds"}


# ------------------------------------------------------------------------------- evaluate


def test_random_policy_equals_hand_tracked_lives():
    wanted = 40
    result = evaluate("arena", SMALL, None, episodes=wanted, num_envs=3, seed=7)
    every = hand_tracked(SMALL, 3, 7, random_choice(7), result.steps)
    assert len(every) >= wanted
    assert every[wanted - 1].step == result.steps  # it stopped in the step the 40th life ended
    assert_matches(result, every[:wanted])
    assert result.policy == "random"
    # the lives vary, so equal means above are not a coincidence of identical lives
    assert len({e.length for e in every[:wanted]}) > 5
    assert any(e.score > 0 for e in every[:wanted]) and any(e.ret < 0 for e in every[:wanted])


def test_act_sees_every_observation_and_its_actions_are_played():
    seen, played = [], []

    def act(obs):
        assert obs.shape == (2 * 4, 5, 5)
        seen.append(obs.clone())
        # a rule of the observation: toward food when it is next to the head, else "up"
        centre = obs[:, 2, 2]
        assert bool((centre == 4).all())  # every head sees itself in the centre (own body)
        actions = torch.zeros(obs.shape[0], dtype=torch.int64)
        for action, (r, c) in enumerate(((1, 2), (3, 2), (2, 1), (2, 3))):
            actions[obs[:, r, c] == 1] = action
        actions[torch.arange(obs.shape[0]) % 3 == 0] = 3  # some rows go right instead
        played.append(actions.clone())
        return actions

    result = evaluate("arena", SMALL, act, episodes=25, num_envs=2, seed=3, policy="rule")
    assert result.policy == "rule" and len(played) == result.steps

    def replay(env, step):
        assert torch.equal(env.obs, seen[step - 1])  # the twin is where evaluate was
        return played[step - 1]

    every = hand_tracked(SMALL, 2, 3, replay, result.steps)
    assert_matches(result, every[:25])


def test_the_first_episodes_are_taken_in_row_order_within_a_step():
    """Where the cut falls inside a step that ends several lives, the lower rows count."""
    every = hand_tracked(SMALL, 4, 11, random_choice(11), 300)
    for n in range(2, len(every)):
        last, after = every[n - 1], every[n]
        in_order = [e.length for e in every[:n]]
        swapped = in_order[:-1] + [after.length]  # the other life of that step instead
        if last.step == after.step and np.mean(swapped) != np.mean(in_order):
            break
    else:
        pytest.fail("no step ended two lives of different lengths; pick another seed")
    result = evaluate("arena", SMALL, None, episodes=n, num_envs=4, seed=11)
    assert result.steps == last.step
    assert result.length_mean == pytest.approx(np.mean(in_order), rel=1e-12)
    assert_matches(result, every[:n])


def test_same_seed_same_result_other_seed_other_result():
    a = evaluate("arena", SMALL, None, episodes=30, num_envs=2, seed=1)
    b = evaluate("arena", SMALL, None, episodes=30, num_envs=2, seed=1)
    c = evaluate("arena", SMALL, None, episodes=30, num_envs=2, seed=2)
    assert strip_time(a) == strip_time(b)
    assert strip_time(a) != strip_time(c)
    assert (a.return_mean, a.length_mean) != (c.return_mean, c.length_mean)


def test_max_steps_stops_early_with_the_lives_ended_so_far():
    result = evaluate("arena", SMALL, None, episodes=10_000, num_envs=2, seed=4, max_steps=15)
    assert result.steps == 15
    every = hand_tracked(SMALL, 2, 4, random_choice(4), 15)
    assert 0 < len(every) < 10_000
    assert_matches(result, every)


def test_no_episode_ended_gives_nan_means():
    # a CartPole episode lasts several steps even under random actions
    result = evaluate("cartpole", {}, None, episodes=5, num_envs=4, seed=0, max_steps=2)
    assert result.episodes == 0 and result.steps == 2
    assert math.isnan(result.return_mean) and math.isnan(result.length_std)
    row = table([result]).splitlines()[1].split()
    assert row == ["random", "0", "-", "-", "-"]  # nothing measured: no number


def test_single_agent_game_counts_episodes_per_env():
    """Snake: one row per env; the score of an episode is its fruit, cleared at its end."""
    env = fasttrain.make("snake", num_envs=4, backend="cpu", seed=9)
    choose = random_choice(9)
    lengths, scores, length = [], [], [0] * 4
    score_before = np.zeros(4)
    while len(lengths) < 12:
        score_before[:] = env.arrays["score"]
        rewards = env.step(choose(env, 0))[1]
        ended = (env.terminated | env.truncated).tolist()
        for row in range(4):
            length[row] += 1
            if ended[row]:
                lengths.append(length[row])
                # the final step can still eat (a fruit, or the win): its reward says so
                scores.append(score_before[row] + (rewards[row] > 0.5).item())
                length[row] = 0
    result = evaluate("snake", {}, None, episodes=12, num_envs=4, seed=9)
    assert result.episodes == 12
    assert result.length_mean == pytest.approx(np.mean(lengths[:12]), rel=1e-12)
    assert result.score_mean == pytest.approx(np.mean(scores[:12]), rel=1e-12)


def test_table_aligns_one_row_per_result():
    a = EvalResult("agent", 200, 1.5, 0.25, 12.0, 3.0, 100.0, 20.5, 900, 1.0)
    b = EvalResult("random", 200, -0.95, 0.1, 0.4, 0.5, 9.25, 4.0, 30, 0.1)
    lines = table([a, b]).splitlines()
    assert lines[0].split() == ["policy", "episodes", "return", "score", "length"]
    assert lines[1].split() == ["agent", "200", "1.500", "±", "0.250", "12.000", "±", "3.000"] + [
        "100.0",
        "±",
        "20.5",
    ]
    assert lines[2].split()[:5] == ["random", "200", "-0.950", "±", "0.100"]
    # columns start at the same place on every line
    for word in ("episodes", "return", "score", "length"):
        column = lines[0].index(word)
        assert lines[1][column - 1] == " " and lines[1][column] != " "
        assert lines[2][column - 1] == " " and lines[2][column] != " "


# ------------------------------------------------------------------------------- a trained run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Two PPO iterations on a small arena: a checkpoint to load, not a good agent."""
    out = tmp_path_factory.mktemp("eval") / "run"
    config = cfg.from_dict(
        {
            "run": {"algo": "ppo", "device": "cpu", "torch_threads": 1, "numba_threads": 1},
            "game": {"name": "arena", "arena": RUN_PARAMS},
            "ppo": {
                "num_envs": 4,
                "num_steps": 8,
                "num_minibatches": 1,
                "anneal_lr": False,
                "total_timesteps": 256,
            },
            "model": {"hidden": 32},
            "log": {"progress": False},
        }
    )
    run(config, out=out, echo=lambda *_: None)
    return out


def test_load_agent_gives_the_runs_params_and_a_greedy_or_sampling_actor(tiny_run):
    greedy, params = load_agent(tiny_run)
    assert {k: params[k] for k in RUN_PARAMS} == RUN_PARAMS
    env = fasttrain.make("arena", num_envs=8, backend="cpu", seed=0, **params)
    for _ in range(3):  # lives of different shapes around the heads
        env.step(torch.randint(0, 4, (env.num_rows,), generator=torch.Generator().manual_seed(0)))
    obs = env.obs.clone()
    assert torch.equal(greedy(obs), load_agent(tiny_run)[0](obs))  # greedy: deterministic
    a0, _ = load_agent(tiny_run, greedy=False, seed=0)
    a0_again, _ = load_agent(tiny_run, greedy=False, seed=0)
    a1, _ = load_agent(tiny_run, greedy=False, seed=1)
    s0, s0_again, s1 = a0(obs), a0_again(obs), a1(obs)
    assert torch.equal(s0, s0_again)  # a seed fixes the samples
    assert not torch.equal(s0, s1)  # an almost untrained policy is near uniform over 4 moves
    assert not torch.equal(s0, greedy(obs))
    assert set(torch.cat([s0, s1]).tolist()) == {0, 1, 2, 3}
    assert load_agent(tiny_run, greedy=False, seed=0)[0](obs).dtype == torch.int64


def test_evaluate_of_the_agent_plays_the_actors_actions(tiny_run):
    act, params = load_agent(tiny_run, greedy=False, seed=5)
    result = evaluate("arena", params, act, episodes=20, num_envs=2, seed=5)
    assert result.policy == "agent"
    twin, _ = load_agent(tiny_run, greedy=False, seed=5)  # the same samples, step by step
    every = hand_tracked(params, 2, 5, lambda env, step: twin(env.obs), result.steps)
    assert_matches(result, every[:20])


# ------------------------------------------------------------------------------- the CLI


def cli(*args, cwd=None):
    """``fasttrain eval ARGS`` in this process: what the command prints and exits with, not
    the process it runs in, is what these tests check."""
    return cli_in_process("eval", *args, cwd=cwd)


def rows(stdout: str) -> dict[str, list[str]]:
    """Table rows by policy; the cells split on runs of two or more spaces."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("policy "))
    out = {}
    for line in lines[start + 1 :]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 5:
            out[cells[0]] = cells[1:]
    return out


def cells(result: EvalResult) -> list[str]:
    return re.split(r"\s{2,}", table([result]).splitlines()[1].strip())[1:]


def assert_one_line_error(done, message: str):
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert done.stdout == ""


def test_cli_random_on_a_game_prints_the_random_row():
    done = cli("--game", "arena", "--random", "--episodes", "20", "--num-envs", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "arena: 2 envs, seed 0, first 20 episodes"
    table_rows = rows(done.stdout)
    assert list(table_rows) == ["random"]
    expected = evaluate("arena", {}, None, episodes=20, num_envs=2, seed=0)
    assert table_rows["random"] == cells(expected)
    assert "agent / random" not in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "eval needs --run DIR, or --game NAME with --random"),
        (["--random"], "eval needs --run DIR, or --game NAME with --random"),
        (["--game", "arena"], "without --run there is no agent: add --random"),
        (["--game", "snek", "--random"], f"unknown game 'snek'; valid: {', '.join(names())}"),
        (["--game", "arena", "--random", "--episodes", "0"], "--episodes"),
    ],
)
def test_cli_bad_input_is_one_line(args, message):
    assert_one_line_error(cli(*args), message)


def test_cli_missing_run_directory_is_one_line(tmp_path):
    done = cli("--run", str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    expected = f"Error: no checkpoint at {tmp_path / 'nowhere' / 'checkpoint.pt'}"
    assert done.stderr.strip().splitlines() == [expected]


def test_cli_agent_against_random_with_json(tiny_run, tmp_path):
    json_path = tmp_path / "eval.json"
    args = ["--run", str(tiny_run), "--random", "--episodes", "20", "--num-envs", "2"]
    done = cli(*args, "--seed", "3", "--json", str(json_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "arena: 2 envs, seed 3, first 20 episodes"
    table_rows = rows(done.stdout)
    assert list(table_rows) == ["agent", "random"]
    data = json.loads(json_path.read_text())
    assert data["game"] == "arena"
    assert {k: data["params"][k] for k in RUN_PARAMS} == RUN_PARAMS
    agent, random = (EvalResult(**r) for r in data["results"])
    assert (agent.policy, random.policy) == ("agent", "random")
    assert agent.episodes == random.episodes == 20
    assert table_rows["agent"] == cells(agent) and table_rows["random"] == cells(random)
    # the random baseline plays the run's world (its params), with the eval seed
    expected = evaluate("arena", data["params"], None, episodes=20, num_envs=2, seed=3)
    assert strip_time(random) == strip_time(expected)
    # and the agent is the run's sampling actor, seeded with the eval seed
    act, params = load_agent(tiny_run, greedy=False, seed=3)
    assert strip_time(agent) == strip_time(evaluate("arena", params, act, 20, 2, 3))
    ratio = agent.score_mean / random.score_mean
    assert f"score: agent / random = {ratio:.1f}x" in done.stdout.splitlines()


def test_cli_greedy_is_deterministic_and_sampling_follows_the_seed(tiny_run):
    args = ["--run", str(tiny_run), "--episodes", "20", "--num-envs", "2"]
    first, second = cli(*args, "--greedy"), cli(*args, "--greedy")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert list(rows(first.stdout)) == ["agent (greedy)"]
    act, params = load_agent(tiny_run, greedy=True)
    expected = evaluate("arena", params, act, episodes=20, num_envs=2, seed=0)
    assert rows(first.stdout)["agent (greedy)"] == cells(expected)
    sampled = cli(*args)
    assert sampled.returncode == 0, sampled.stderr
    assert list(rows(sampled.stdout)) == ["agent"]
    assert rows(sampled.stdout)["agent"] != rows(first.stdout)["agent (greedy)"]


def test_cli_game_other_than_the_runs_is_refused(tiny_run):
    done = cli("--run", str(tiny_run), "--game", "snake", "--random", "--episodes", "5")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "checkpoint was trained on 'arena', not 'snake'" in done.stderr


def test_cli_greedy_without_a_run_is_refused():
    done = cli("--game", "arena", "--random", "--greedy")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--greedy plays a trained agent" in done.stderr


# ------------------------------------------------------------------------------- bots

# SMALL with bot slots: the bots' lives are followed by hand from their lengths alone
BOTS = SMALL | {"max_bots": 3, "num_bots": 2}


@dataclass
class BotLives:
    lives: int
    food: int
    steps: int


def hand_tracked_bots(params: dict, num_envs: int, seed: int, choose, steps: int) -> BotLives:
    """Every bot life that ends in ``steps`` steps of a twin env, read from the bots' lengths
    (not from the game's own sums): a bot on the map moves once per step, it ate in a step it
    grew, and its life ended in a step after which it is off the map. The twin must never end
    all of an env's agents in one step (the map would restart, cutting the bots' lives)."""
    env = fasttrain.make("arena", num_envs=num_envs, backend="cpu", seed=seed, **params)
    agents, bots = env.num_agents, params["max_bots"]
    moves, food = np.zeros((num_envs, bots), int), np.zeros((num_envs, bots), int)
    total = BotLives(0, 0, 0)
    for step in range(1, steps + 1):
        before = env.state["length"][:, agents:].copy()
        env.step(choose(env, step))
        ended = (env.terminated | env.truncated).numpy().reshape(num_envs, agents)
        assert not ended.all(axis=1).any(), f"step {step} restarted a map: pick another seed"
        after = env.state["length"][:, agents:]
        assert after.max() < params.get("max_snake_length", 64)  # growing means eating
        alive = before > 0
        moves += alive
        food += alive & (after == before + 1)
        died = alive & (after == 0)
        total.lives += int(died.sum())
        total.food += int(food[died].sum())
        total.steps += int(moves[died].sum())
        moves[died | ~alive], food[died | ~alive] = 0, 0
    # the game's own sums say the same
    food_sum, steps_sum, lives_sum = (
        float(env.state[f"bot_done_{name}"].sum()) for name in ("food", "steps", "lives")
    )
    assert (lives_sum, food_sum, steps_sum) == (total.lives, total.food, total.steps)
    return total


@pytest.mark.parametrize("policy", ["random", "greedy"])
def test_evaluate_reports_the_bots_lives_as_followed_by_hand(policy):
    params = BOTS | {"bot_policy": policy}
    result = evaluate("arena", params, None, episodes=100, num_envs=3, seed=5)
    bots = result.bots
    assert bots is not None and bots.policy == f"{policy} bots"
    every = hand_tracked(params, 3, 5, random_choice(5), result.steps)
    assert_matches(result, every[:100])  # the agents' figures are unchanged by the bots' row
    lives = hand_tracked_bots(params, 3, 5, random_choice(5), result.steps)
    assert lives.lives >= 3 and lives.food >= 1  # the bots lived, ate and died
    assert bots.episodes == lives.lives and bots.steps == result.steps
    assert bots.score_mean == pytest.approx(lives.food / lives.lives, rel=1e-12)
    assert bots.length_mean == pytest.approx(lives.steps / lives.lives, rel=1e-12)
    for name in ("return_mean", "return_std", "score_std", "length_std"):
        assert math.isnan(getattr(bots, name)), name
    assert bots.bots is None


def test_evaluate_has_no_bots_result_without_active_bots():
    assert evaluate("arena", SMALL, None, episodes=5, num_envs=2, seed=1).bots is None
    idle = SMALL | {"max_bots": 2, "num_bots": 0}  # room for bots, none playing
    assert evaluate("arena", idle, None, episodes=5, num_envs=2, seed=1).bots is None
    assert evaluate("snake", {}, None, episodes=2, num_envs=2, seed=1).bots is None


def test_table_puts_the_bots_row_under_its_result():
    bots = EvalResult("greedy bots", 7, math.nan, math.nan, 1.25, math.nan, 30.5, math.nan, 9, 0)
    agent = EvalResult("agent", 20, 1.5, 0.25, 2.0, 1.0, 10.0, 2.5, 9, 0.1, bots=bots)
    other = EvalResult("random", 20, -1.0, 0.0, 0.5, 0.5, 5.0, 1.0, 9, 0.1)
    lines = table([agent, other]).splitlines()
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[1:]] == [
        ["agent", "20", "1.500 ± 0.250", "2.000 ± 1.000", "10.0 ± 2.5"],
        ["greedy bots", "7", "-", "1.250", "30.5"],  # no return, means without a std
        ["random", "20", "-1.000 ± 0.000", "0.500 ± 0.500", "5.0 ± 1.0"],
    ]


@pytest.fixture(scope="module")
def bot_run(tmp_path_factory):
    """A tiny run trained beside one greedy bot (room for two), through the CLI."""
    out = tmp_path_factory.mktemp("eval_bots") / "run"
    args = ["--game", "arena", "--steps", "4096", "--num-envs", "4", "--device", "cpu"]
    sets = ["ppo.num_steps=8", "ppo.num_minibatches=1", "game.arena.max_bots=2"]
    sets += ["game.arena.num_bots=1", "run.torch_threads=1", "run.numba_threads=1"]
    done = cli_in_process("run", *args, "--out", out, *[x for s in sets for x in ("--set", s)])
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def table_rows(stdout: str) -> list[list[str]]:
    """Every table row in order (rows may share a policy name)."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("policy "))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start + 1 :] if line.strip()]


def test_cli_bots_plays_the_agent_beside_each_bot_policy(bot_run, tmp_path):
    json_path = tmp_path / "bots.json"
    args = ["--run", str(bot_run), "--bots", "--episodes", "12", "--num-envs", "2"]
    done = cli(*args, "--seed", "4", "--json", str(json_path))
    assert done.returncode == 0, done.stderr
    got = table_rows(done.stdout)
    # the same evaluations in process: the run's world, then one per policy with the run's
    # bots (num_bots 1), one sampling actor seeded with the eval seed playing them in turn
    act, params = load_agent(bot_run, greedy=False, seed=4)
    assert (params["max_bots"], params["num_bots"], params["bot_policy"]) == (2, 1, "greedy")
    expected = [evaluate("arena", params, act, 12, 2, 4, policy="agent")]
    for policy in ("random", "greedy", "cautious"):
        world = params | {"bot_policy": policy}
        expected.append(evaluate("arena", world, act, 12, 2, 4, policy=f"agent vs {policy} bots"))
    want = [row for r in expected for row in (r, r.bots)]  # each result, then its bots
    labels = ["agent", "greedy bots"]
    for policy in ("random", "greedy", "cautious"):
        labels += [f"agent vs {policy} bots", f"{policy} bots"]
    assert [row[0] for row in got] == [r.policy for r in want] == labels
    assert [row[1:] for row in got] == [cells(r) for r in want]
    # JSON: strict (NaN written as null), each result with its bots nested
    text = json_path.read_text()

    def no_constants(name):
        raise AssertionError(f"{name} in the JSON")

    data = json.loads(text, parse_constant=no_constants)
    assert [r["policy"] for r in data["results"]] == [r.policy for r in expected]
    for row, result in zip(data["results"], expected, strict=True):
        bots = row["bots"]
        assert bots["policy"] == result.bots.policy and bots["episodes"] == result.bots.episodes
        assert bots["return_mean"] is None and bots["score_std"] is None
        if result.bots.episodes:
            assert bots["score_mean"] == result.bots.score_mean
        else:
            assert bots["score_mean"] is None


def test_cli_bots_on_a_run_without_bots_is_one_line(tiny_run):
    done = cli("--run", str(tiny_run), "--bots", "--episodes", "5", "--num-envs", "2")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "Error: --bots needs a game with bots and room for them; this arena run has none "
        "(max_bots = 0)"
    ]


def test_cli_bots_without_a_run_is_a_usage_error():
    assert_one_line_error(
        cli("--game", "arena", "--random", "--bots"), "--bots plays a trained agent: add --run DIR"
    )

"""Action repeat inside the step launch: k game steps with one action, rewards summed, stopping
at the episode's end; checked against k plain steps of a twin environment."""

import json

import pytest
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import KernelEnv
from tests.cli import header


def copy_state(src, dst):
    for name, array in src._core.arrays.items():
        dst._core.arrays[name][...] = array


@pytest.mark.parametrize(
    "game,backend,n", [("cartpole", "python", 6), ("snake", "python", 6), ("snake", "cpu", 64)]
)
def test_repeat_sums_rewards_over_k_steps_and_stops_at_the_episode_end(game, backend, n):
    k = 4
    params = {"height": 5, "width": 5} if game == "snake" else {}
    plain = fasttrain.make(game, n, backend, seed=3, **params)
    repeated = fasttrain.make(game, n, backend, seed=3, action_repeat=k, **params)
    assert repeated.action_repeat == k
    generator = torch.Generator().manual_seed(0)
    ended_early = 0
    for _ in range(25):
        actions = torch.randint(0, plain.num_actions, (n,), generator=generator)
        _, reward, terminated, truncated = repeated.step(actions)
        total = torch.zeros(n)
        done = torch.zeros(n, dtype=torch.bool)
        final = torch.zeros_like(repeated.final_obs)
        inner = torch.zeros(n, dtype=torch.int64)
        for _ in range(k):  # the twin: k plain steps, each row counted until its episode ends
            _, r, te, tr = plain.step(actions)
            live = ~done
            total = torch.where(live, total + r, total)
            inner += live
            ended_now = live & (te | tr)
            final[ended_now] = plain.final_obs[ended_now]
            done |= te | tr
        assert torch.equal(terminated | truncated, done)
        assert torch.equal(reward, total)  # float32 sums in step order: exact
        assert torch.equal(repeated.obs[~done], plain.obs[~done])  # k steps on
        assert torch.equal(repeated.final_obs[done], final[done])
        ended_early += int((done & (inner < k)).sum())
        copy_state(repeated, plain)  # rows that ended restart differently in the twin
    assert ended_early > 0, "no episode ended inside a repeat: the test checks nothing"


def test_repeat_one_is_the_plain_step():
    plain = fasttrain.make("cartpole", 32, "cpu", seed=5)
    once = fasttrain.make("cartpole", 32, "cpu", seed=5, action_repeat=1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        actions = torch.randint(0, 2, (32,), generator=generator)
        a, b = plain.step(actions), once.step(actions)
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("bad", [0, -2])
def test_bad_repeat_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="action_repeat must be >= 1"):
        fasttrain.make("cartpole", 4, "python", action_repeat=bad)


def test_repeat_needs_a_single_agent_game():
    spec = games.get("arena")
    with pytest.raises(ValueError, match="single-agent"):
        KernelEnv(spec, 2, "python", spec.make_params(), action_repeat=2)
    assert KernelEnv(spec, 1, "python", spec.make_params()).action_repeat == 1


def test_eval_plays_a_run_with_its_action_repeat(tmp_path):
    from click.testing import CliRunner

    from fasttrain.cli import main
    from fasttrain.config import resolve as cfg
    from fasttrain.evaluate import evaluate
    from fasttrain.run.checkpoint import load_agent
    from fasttrain.run.runner import run

    config = cfg.from_dict(
        {
            "run": {"action_repeat": 3},
            "game": {
                "name": "cartpole",
                "cartpole": {"ppo": {"total_timesteps": 512, "num_envs": 16, "num_steps": 16}},
            },
            "model": {"hidden": 16},
            "log": {"progress": False, "curves": False},
        }
    )
    lines = []
    run(config, out=tmp_path / "run", echo=lines.append)
    assert "action repeat 3: each step plays up to 3 game steps" in header("\n".join(lines))
    json_path = tmp_path / "eval.json"
    args = ["eval", "--run", str(tmp_path / "run"), "--episodes", "8", "--num-envs", "4"]
    result = CliRunner().invoke(main, [*args, "--greedy", "--json", str(json_path)])
    assert result.exit_code == 0, result.output
    (reported,) = json.loads(json_path.read_text())["results"]
    act, params = load_agent(tmp_path / "run")
    repeated = evaluate("cartpole", params, act, 8, 4, 0, action_repeat=3)
    plain = evaluate("cartpole", params, act, 8, 4, 0)
    assert reported["return_mean"] == repeated.return_mean != plain.return_mean

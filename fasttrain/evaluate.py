"""Evaluation: play fresh environments with a fixed seed until N episodes end; report means.

With several agents per environment an episode is one agent's life, so ``score`` is what one
life gathers (food per life in the arena) and ``length`` how long it survived.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

import fasttrain
from fasttrain.errors import ConfigError


@dataclass(frozen=True)
class EvalResult:
    """Means and standard deviations over the first ``episodes`` episodes that ended."""

    policy: str
    episodes: int
    return_mean: float
    return_std: float
    score_mean: float
    score_std: float
    length_mean: float
    length_std: float
    steps: int  # vectorised steps taken
    seconds: float
    bots: EvalResult | None = None  # the game's scripted bots in the same worlds, if any

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate(
    game: str,
    params: dict,
    act: Callable | None,
    episodes: int = 100,
    num_envs: int = 16,
    seed: int = 0,
    max_steps: int = 100_000,
    policy: str = "",
    action_repeat: int = 1,
) -> EvalResult:
    """Play ``num_envs`` fresh environments (seeded with ``seed``) until ``episodes`` episodes
    (agent lives) have ended, choosing actions with ``act(obs) -> actions`` or, with
    ``act=None``, uniformly at random. An ``act`` with ``is_recurrent`` true (a recurrent
    ``PolicyActor``) is called ``act(obs, episode_starts)`` and starts fresh. Episodes are
    counted in the order they end (row order within a step), so a seed gives the same result
    every time. Stops after ``max_steps`` vectorised steps with whatever has ended
    (``episodes`` says how many). ``action_repeat``: as the run trained with (lengths count
    agent decisions, as ``episodic_length`` does in metrics.csv)."""
    env = fasttrain.make(
        game, num_envs=num_envs, backend="cpu", seed=seed, action_repeat=action_repeat, **params
    )
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    if getattr(act, "is_recurrent", False):
        act.reset()
    ended, steps = play(env, act, generator, episodes, max_steps)
    seconds = time.perf_counter() - start
    bots = None
    if "bot_done_lives" in env.state and getattr(env.params, "num_bots", 0) > 0:
        bots = _bots(env, steps, seconds)  # scripted snakes in the same worlds, same steps
    policy = policy or ("random" if act is None else "agent")
    return _result(policy, {k: v[:episodes] for k, v in ended.items()}, steps, seconds, bots)


def _result(policy: str, ended: dict, steps: int, seconds: float, bots) -> EvalResult:
    """The means and deviations of the ``ended`` episodes' return, score and length."""
    values = {k: np.asarray(v, dtype=np.float64) for k, v in ended.items()}
    n = len(values["return"])

    def stat(key, fn):
        return float(fn(values[key])) if n else math.nan

    return EvalResult(
        policy=policy,
        episodes=n,
        return_mean=stat("return", np.mean),
        return_std=stat("return", np.std),
        score_mean=stat("score", np.mean),
        score_std=stat("score", np.std),
        length_mean=stat("length", np.mean),
        length_std=stat("length", np.std),
        steps=steps,
        seconds=seconds,
        bots=bots,
    )


def play(env, act: Callable | None, generator, episodes: int, max_steps: int):
    """Step ``env`` until ``episodes`` episodes have ended or ``max_steps`` steps were taken;
    returns the return, score and length of each episode that ended, in the order they ended
    (row order within a step), and the steps taken."""
    sums = {k: env.arrays[f"done_{k}"] for k in ("return", "score", "length")}
    previous = {k: v.copy() for k, v in sums.items()}
    ended: dict[str, list] = {k: [] for k in sums}
    steps, episode_starts = 0, None
    with torch.inference_mode():
        while len(ended["return"]) < episodes and steps < max_steps:
            if act is None:
                actions = torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)
            else:
                actions = choose(act, env.obs, episode_starts)
            env.step(actions)
            steps += 1
            episode_starts = env.terminated | env.truncated
            rows = np.flatnonzero(episode_starts.numpy())
            for key, total in sums.items():  # the ended episode's value: what its row just added
                ended[key].extend((total[rows] - previous[key][rows]).tolist())
                previous[key][rows] = total[rows]
    return ended, steps


@dataclass(frozen=True)
class Evaluation:
    """What ``fasttrain eval`` reports: the game, its params and one result per policy played
    (the agent first, the random baseline last where asked)."""

    game: str
    params: dict
    results: list
    random_baseline: bool = False

    def report(self) -> list[str]:
        """The table, and the agent's score over the random baseline's where both are in it."""
        lines = [table(self.results)]
        results = self.results
        if self.random_baseline and len(results) >= 2 and results[-1].score_mean > 0:
            ratio = results[0].score_mean / results[-1].score_mean
            lines.append(f"score: agent / random = {ratio:.1f}x")
        return lines


def evaluate_run(
    run_dir,
    game: str | None,
    episodes: int,
    num_envs: int,
    seed: int,
    greedy: bool = False,
    random_baseline: bool = False,
    against_bots: bool = False,
) -> Evaluation:
    """``fasttrain eval``: the agent of ``run_dir`` (if any; ``game`` is checked against its
    run), beside each bot policy with ``against_bots``, and uniformly random actions in the
    same world (the same action repeat) with ``random_baseline``."""
    results, params, repeat = [], {}, 1
    if run_dir is not None:
        from fasttrain.run.checkpoint import load, load_agent, saved_config

        act, params = load_agent(run_dir, game, greedy=greedy, seed=seed)  # checks --game
        saved = saved_config(run_dir, load(run_dir))
        game, repeat = saved.game.name, saved.run.action_repeat
        what = "agent (greedy)" if greedy else "agent"
        results.append(
            evaluate(game, params, act, episodes, num_envs, seed, policy=what, action_repeat=repeat)
        )
        if against_bots:
            play = (act, episodes, num_envs, seed, repeat)
            results += evaluate_against_bots(game, params, what, *play)
    if random_baseline:
        results.append(evaluate(game, params, None, episodes, num_envs, seed, action_repeat=repeat))
    return Evaluation(game, params, results, random_baseline)


def evaluate_against_bots(game, params, what, act, episodes, num_envs, seed, repeat) -> list:
    """The agent beside each bot policy of the game (``eval --bots``): one result per policy,
    with as many bots as the run had (or as there is room for)."""
    policies = fasttrain.games.get(game).choices.get("bot_policy")
    if not policies or not params.get("max_bots"):
        raise ConfigError(
            f"--bots needs a game with bots and room for them; this {game} run has none "
            "(max_bots = 0)"
        )
    num_bots = params["num_bots"] or params["max_bots"]
    results = []
    for policy in policies:
        world = {**params, "bot_policy": policy, "num_bots": num_bots}
        label = f"{what} vs {policy} bots"
        results.append(
            evaluate(game, world, act, episodes, num_envs, seed, policy=label, action_repeat=repeat)
        )
    return results


def choose(act: Callable, obs, episode_starts):
    """``act``'s actions for ``obs``: a recurrent actor (``is_recurrent``) also gets the rows
    whose episodes start (None on the first step), any other callable the observations alone."""
    if getattr(act, "is_recurrent", False):
        return act(obs, episode_starts)
    return act(obs)


def _bots(env, steps: int, seconds: float) -> EvalResult:
    """Mean food per life and survival of the bots over every bot life that ended: the game
    keeps ``bot_done_food``, ``bot_done_steps`` and ``bot_done_lives`` summed per env, so no
    standard deviations."""
    state = env.state
    food, steps_lived, count = (
        float(state[name].sum()) for name in ("bot_done_food", "bot_done_steps", "bot_done_lives")
    )
    count = int(count)
    policy = getattr(env.params, "bot_policy", "scripted")
    return EvalResult(
        policy=f"{policy} bots",
        episodes=count,
        return_mean=math.nan,
        return_std=math.nan,
        score_mean=food / count if count else math.nan,
        score_std=math.nan,
        length_mean=steps_lived / count if count else math.nan,
        length_std=math.nan,
        steps=steps,
        seconds=seconds,
    )


def table(results: list[EvalResult]) -> str:
    """The results as aligned text rows: policy, episodes, return, score and length."""
    rows = [("policy", "episodes", "return", "score", "length")]
    results = [x for r in results for x in (r, r.bots) if x is not None]
    for r in results:
        rows.append(
            (
                r.policy,
                str(r.episodes),
                _cell(r.return_mean, r.return_std, 3),
                _cell(r.score_mean, r.score_std, 3),
                _cell(r.length_mean, r.length_std, 1),
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _cell(mean: float, std: float, digits: int) -> str:
    """``mean ± std``; ``-`` for a mean not measured, the mean alone without a std."""
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")

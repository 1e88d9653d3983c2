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
) -> EvalResult:
    """Play ``num_envs`` fresh environments (seeded with ``seed``) until ``episodes`` episodes
    (agent lives) have ended, choosing actions with ``act(obs) -> actions`` or, with
    ``act=None``, uniformly at random. Episodes are counted in the order they end (row order
    within a step), so a seed gives the same result every time. Stops after ``max_steps``
    vectorised steps with whatever has ended (``episodes`` says how many)."""
    env = fasttrain.make(game, num_envs=num_envs, backend="cpu", seed=seed, **params)
    generator = torch.Generator().manual_seed(seed)
    sums = {k: env.arrays[f"done_{k}"] for k in ("return", "score", "length")}
    previous = {k: v.copy() for k, v in sums.items()}
    ended: dict[str, list] = {k: [] for k in sums}
    start, steps = time.perf_counter(), 0
    with torch.inference_mode():
        while len(ended["return"]) < episodes and steps < max_steps:
            if act is None:
                actions = torch.randint(0, env.num_actions, (env.num_rows,), generator=generator)
            else:
                actions = act(env.obs)
            env.step(actions)
            steps += 1
            rows = np.flatnonzero((env.terminated | env.truncated).numpy())
            for key, total in sums.items():  # the ended episode's value: what its row just added
                ended[key].extend((total[rows] - previous[key][rows]).tolist())
                previous[key][rows] = total[rows]
    values = {k: np.asarray(v[:episodes], dtype=np.float64) for k, v in ended.items()}
    n = len(values["return"])

    def stat(key, fn):
        return float(fn(values[key])) if n else math.nan

    return EvalResult(
        policy=policy or ("random" if act is None else "agent"),
        episodes=n,
        return_mean=stat("return", np.mean),
        return_std=stat("return", np.std),
        score_mean=stat("score", np.mean),
        score_std=stat("score", np.std),
        length_mean=stat("length", np.mean),
        length_std=stat("length", np.std),
        steps=steps,
        seconds=time.perf_counter() - start,
    )


def table(results: list[EvalResult]) -> str:
    """The results as aligned text rows: policy, episodes, return, score and length."""
    rows = [("policy", "episodes", "return", "score", "length")]
    for r in results:
        rows.append(
            (
                r.policy,
                str(r.episodes),
                f"{r.return_mean:.3f} ± {r.return_std:.3f}",
                f"{r.score_mean:.3f} ± {r.score_std:.3f}",
                f"{r.length_mean:.1f} ± {r.length_std:.1f}",
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )

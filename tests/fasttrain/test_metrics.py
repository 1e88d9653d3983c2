"""fasttrain.metrics alone: episode means over the batches the environments report."""

from __future__ import annotations

import math
from types import SimpleNamespace

from fasttrain import metrics


def trainer(**fields):
    ctx = SimpleNamespace(updates=fields.pop("updates", 0))
    return SimpleNamespace(global_step=0, iteration=0, ctx=ctx, **fields)


def test_episode_means_over_batches_and_the_last_ones_when_none_ended():
    env = SimpleNamespace(
        batches=[
            {"episodes": 2, "return": 1.0, "length": 10.0, "score": 1.0},
            {"episodes": 6, "return": 3.0, "length": 20.0, "score": 2.0},
        ]
    )
    env.stats = lambda: env.batches.pop(0) if env.batches else {}
    t = trainer(env=env, device="cpu")
    episodes = metrics.Episodes(t, SimpleNamespace(enabled=False))
    assert all(math.isnan(v) for v in episodes.take().values())  # before any episode
    episodes.read(), episodes.read()
    assert episodes.take() == {"return": 2.5, "length": 17.5, "score": 1.75}  # weighted by count
    assert episodes.read() == {} and episodes.take() == {
        "return": 2.5,
        "length": 17.5,
        "score": 1.75,
    }

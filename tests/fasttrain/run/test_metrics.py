"""fasttrain.run.metrics: episode means over stats batches, the metrics.csv row, and a console line
that fits 120 columns (``tests/integration/test_first_run.py`` runs one and reads its lines)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from fasttrain.learners import LEARNERS
from fasttrain.run import metrics


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


PPO = LEARNERS["ppo"].short_names


DQN = LEARNERS["dqn"].short_names


PPO_LOSSES = {
    "losses/policy_loss": -0.000297312,
    "losses/value_loss": 0.133113,
    "losses/entropy": 1.38612,
    "losses/approx_kl": 6.61213e-06,
    "losses/clipfrac": 0.0123,
    "losses/skipped_updates": 0.0,
}


SPLIT = {"env": 0.05, "forward": 0.66, "learn": 0.29, "other": 0.0}


@pytest.mark.parametrize("unit", ["SPS", "agent SPS"])
@pytest.mark.parametrize("at", ["", "stage 12/12 | "])
@pytest.mark.parametrize(
    "episode",
    [
        {"return": -0.92, "score": 0.08, "length": 13.8},
        {"return": 12345.678, "score": 9999.5, "length": 27000.0},
        {"return": math.nan, "score": math.nan, "length": math.nan},
    ],
)
@pytest.mark.parametrize("skipped", [0.0, 12.0])
def test_the_default_log_line_fits_120_columns(unit, at, episode, skipped):
    losses = {**PPO_LOSSES, "losses/skipped_updates": skipped}
    for step, sps in ((98_304, 1249.3), (50_003_968, 230_123.0), (123_456_789_012, 4.2e7)):
        line = metrics.console_line(step, sps, unit, "20h10m", at, episode, losses, SPLIT, PPO)
        assert len(line) <= 120, line
        assert line.startswith("step ")
        # the first loss fits unless both a stage and skipped updates take its room
        assert " pg " in line or (at and skipped), line
        assert ("skipped 12" in line) is bool(skipped)  # a skipped update is never left out
        assert "forward" not in line  # where the time went is on the wide line only
    wide = metrics.console_line(step, sps, unit, "--", at, episode, losses, SPLIT, PPO, wide=True)
    assert len(wide) > 120 and "clip 0.0123" in wide and "forward 66%" in wide


def test_the_log_line_shows_what_fits_in_the_learners_order():
    episode = {"return": 21.5, "score": 20.0, "length": 150.2}
    line = metrics.console_line(
        50_003_968, 230_123, "SPS", "3m07s", "", episode, PPO_LOSSES, {}, PPO
    )
    assert line == (
        "step  50.0M |   230k SPS | ETA  3m07s | return   21.50 | score  20.00 | len  150.2 | "
        "pg -0.0003 v 0.13 ent 1.4 kl 6.6e-6"
    )
    dqn = {"losses/td_loss": 0.0421, "losses/q_values": 3.21, "charts/epsilon": 0.05}
    line = metrics.console_line(2048, 999.9, "SPS", "--", "", episode, dqn, {}, DQN)
    assert line.endswith("| len  150.2 | td 0.042 q 3.2 eps 0.05"), line
    assert line.startswith("step  2.05k |  1.00k SPS | ETA     -- |"), line


def test_episode_means_weigh_each_batch_by_its_episodes():
    one = {"return": 1.5, "length": 10.0, "score": 1.0, "episodes": 3}
    assert metrics.combine([one]) == {"return": 1.5, "length": 10.0, "score": 1.0}
    two = {"return": 6.0, "length": 30.0, "score": 5.0, "episodes": 1}
    assert metrics.combine([one, two]) == {"return": 2.625, "length": 15.0, "score": 2.0}


def test_a_row_has_cleanrls_columns_the_stage_counted_from_one_and_rounded_times():
    trainer = type("Trainer", (), {"global_step": 4096, "learning_rate": 2.5e-4})()
    episode = {"return": 3.0, "length": 40.0, "score": 2.0}
    losses = {"losses/value_loss": 0.5}
    row = metrics.row(trainer, 12.34567, 331.77, episode, losses, {"env": 0.123456}, stage=0)
    assert row == {
        "global_step": 4096,
        "time_s": 12.346,
        "sps": 331.8,
        "charts/episodic_return": 3.0,
        "charts/episodic_length": 40.0,
        "charts/score": 2.0,
        "charts/learning_rate": 2.5e-4,
        metrics.STAGE_COLUMN: 1,
        "losses/value_loss": 0.5,
        "time/env": 0.1235,
    }
    assert metrics.STAGE_COLUMN not in metrics.row(trainer, 1.0, 1.0, episode, {}, {})


@pytest.mark.parametrize(
    "seconds, text",
    [(-3, "0s"), (0.4, "0s"), (42, "42s"), (187, "3m07s"), (3720, "1h02m"), (90061, "25h01m")],
)
def test_a_duration_reads_in_hours_minutes_or_seconds(seconds, text):
    assert metrics.duration(seconds) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (987, "987"),
        (999.4, "999"),
        (999.6, "1.00k"),
        (98_304, "98.3k"),
        (1_249_999, "1.25M"),
        (50_003_968, "50.0M"),
        (4.5e9, "4.50B"),
        (-2500, "-2.50k"),
    ],
)
def test_si_keeps_three_significant_digits(value, text):
    assert metrics.si(value) == text


@pytest.mark.parametrize(
    "value, text",
    [(0.133113, "0.13"), (-0.000297312, "-0.0003"), (6.6e-6, "6.6e-6"), (1440, "1.4e3")],
)
def test_short_keeps_two_significant_digits_and_an_unpadded_exponent(value, text):
    assert metrics.short(value) == text


def test_wrap_breaks_at_separators_and_indents_the_rest():
    # "aaaa | bbbb |" is 13 columns: the separator that ends a line counts
    assert metrics.wrap(["aaaa", "bbbb", "cc"], " | ", width=13) == "aaaa | bbbb |\n  cc"
    assert metrics.wrap(["aaaa", "bbbb", "cc"], " | ", width=12) == "aaaa |\n  bbbb |\n  cc"
    assert metrics.wrap(["a" * 20, "b"], ", ", width=10) == "a" * 20 + ",\n  b"
    assert metrics.wrap(["one"], " | ") == "one"

"""Tuned per-game settings: the built-in ``[game.<name>.<learner>]`` and ``[game.<name>.model]``
values, and the game parameters a game trains with when they differ from the game's own defaults
(``"params"``, written as ``[game.<name>]``).

They sit just above the learners' dataclass defaults; a user's ``--config`` file and ``--set``
beat them (see ``fasttrain.config``). Each entry says what it was tuned to reach.
"""

from __future__ import annotations

MINATAR_GAMES = (
    "minatar-asterix",
    "minatar-breakout",
    "minatar-freeway",
    "minatar-seaquest",
    "minatar-space_invaders",
)
MINATAR = {
    "model": {"activation": "relu", "hidden": 256},
    "ppo": {
        "total_timesteps": 10_000_000,
        "num_envs": 128,
        "num_steps": 64,
        "num_minibatches": 4,
        "update_epochs": 4,
        "ent_coef": 0.03,
    },
    # PQN: purejaxql's MinAtar settings (128 envs x 32 steps, 2 epochs x 32 minibatches, lr 5e-4
    # annealed, lambda 0.65, epsilon 1 -> 0.05 over the first 10%: the [pqn] defaults), 10M steps.
    # Seed 0, 2-core AMD EPYC, mean of the last twentieth: Seaquest 77.3 (PPO 5.2), Asterix 37.3
    # (PPO 14.7), Freeway 61.2 (PPO 61.4), Breakout 39.9 (PPO 42.5) (docs/algorithms.md#pqn)
    "pqn": {"total_timesteps": 10_000_000},
}

GAME_DEFAULTS: dict[str, dict[str, dict]] = {
    "snake": {
        "model": {"activation": "relu"},
        # 12x12 Snake on 2 CPU cores (bf16, compiled update). Sizes, learning rate and
        # gae_lambda: `fasttrain sweep` on the time to score 20; ent_coef 0.03 and gamma 0.995: a
        # sweep on the final score of 150 s runs (20 trials, 2 seeds each: 42.8 against 31.1). AMD
        # EPYC, seeds 0-2: 60M steps ended at 50.4, 49.5, 43.7 (the old ent_coef 0.02 and gamma
        # 0.99: 46.4, 38.8, 36.5); these 50M steps at 51.6, 36.5, 49.6 after 186-237 s of
        # training (score 20 after 19-23 s), inside 5 minutes with bf16
        "ppo": {
            "total_timesteps": 50_000_000,
            "num_envs": 512,
            "num_steps": 32,
            "num_minibatches": 2,
            "learning_rate": 1.66e-3,
            "gamma": 0.995,
            "gae_lambda": 0.9,
            "ent_coef": 0.03,
        },
        # PQN on 12x12 Snake (2 busy CPU cores, one thread, 3M-step checks, seed 0): 16
        # minibatches of 1024 ended at 8.0 (lr 1e-3) and 8.5 (lr 2e-3), 4 minibatches at 2.8,
        # 32 at 8.5 in twice the time, q_lambda 0.3 at 2.7, gamma 0.995 with q_lambda 0.8 at 6.9
        "pqn": {
            "total_timesteps": 20_000_000,
            "num_envs": 512,
            "num_minibatches": 16,
            "learning_rate": 2e-3,
        },
        # 12x12 Snake on 2 CPU cores (Xeon with AMX, bf16 update): mean score ~9 after 10M
        # steps in ~85 s at ~115k SPS, where the earlier 64 envs with 256-sample batches (4
        # sampled transitions per env transition) reached ~7-8 after 5M steps in ~270 s at ~19k
        # SPS. One 1024-sample batch per step of 1024 envs, at twice the learning rate and a
        # slower target network, learns as much per env step in a seventh of the time.
        "dqn": {
            "total_timesteps": 10_000_000,
            "num_envs": 1024,
            "num_steps": 32,
            "train_frequency": 1,
            "batch_size": 1024,
            "n_step": 3,
            "double_q": True,
            "learning_rate": 1e-3,
            "target_network_frequency": 40_000,
            "exploration_fraction": 0.1,
        },
    },
    "arena": {
        "model": {"activation": "relu"},
        # the default 24x24 arena, 8 snakes each: ~14 food per life after ~1.3M agent steps
        # (uniformly random snakes: ~0.5), on 2 CPU cores
        "ppo": {
            "total_timesteps": 10_000_000,
            "num_envs": 64,
            "num_steps": 32,
            "num_minibatches": 2,
        },
    },
    # MinAtar's full action sets and sticky actions (its defaults). Breakout: mean return ~10
    # after 1M steps (~30 s on 2 CPU cores), 22 after 10M (356 s); random play 0.43. ent_coef
    # 0.03 (not 0.01-0.02) and 256 units got past a plateau at 7 where the policy had stopped
    # exploring. The MLP beat MinAtar's CNN per second on a CPU; "auto" picks the CNN on a GPU.
    # The other MinAtar games share Breakout's setting (not tuned for them). With it, seeds 0-2
    # (`bench --learning`, 10M steps, bf16, 2-core AMD EPYC, 2026-11-26): Space Invaders 444.6,
    # 347.3, 367.6 in 272-295 s (pgx PPO ~145). Freeway and Space Invaders anneal ent_coef (below)
    **{name: {section: dict(v) for section, v in MINATAR.items()} for name in MINATAR_GAMES},
    # Breakout trains on pgx's minimal action set (no-op, left, right: MinAtar's own default
    # stays the full six) with 512 units: mean return 41.2, 52.8, 36.0 after 10M steps on an AMD
    # EPYC with bf16 (seeds 0-2, 533-595 s, `bench --learning` 2026-11-26; pgx PPO ~50) and 71.5
    # in fp32 on an Intel Xeon (seed 0, 926 s; 10 after 1.4M steps); 22.6 with the shared
    # MinAtar setting above
    "minatar-breakout": {
        "params": {"minimal_action_set": True},
        "model": {**MINATAR["model"], "hidden": 512},
        # ppo.anneal_ent (as Freeway and Space Invaders, below) was dropped here: seeds 0-2
        # ended at 51.6, 32.1, 33.2 in 514-563 s (median 33.2 against 41.2, the same day); a
        # constant ent_coef of 0.01 stalled seed 0 at 8 for 200 s (41.2's run: 20 by then)
        "ppo": dict(MINATAR["ppo"]),
        "pqn": dict(MINATAR["pqn"]),
    },
    # Freeway on pgx's minimal action set too (no-op, up, down): seeds 0-2 ended at 62.8, 62.6,
    # 62.8 in 266-292 s, where the full six ended at 61.6, 61.5, 61.0 in 303-337 s (`bench
    # --learning`, 10M steps, bf16, 2-core AMD EPYC, 2026-11-26; pgx PPO ~63) with the shared
    # constant entropy bonus
    "minatar-freeway": {
        "params": {"minimal_action_set": True},
        "model": dict(MINATAR["model"]),
        "pqn": dict(MINATAR["pqn"]),
        # the entropy bonus decays with the learning rate (ppo.anneal_ent): seeds 0-2 ended at
        # 64.3, 64.1, 64.0 in 274-302 s (the same measure and day; constant: the 62.8s above)
        "ppo": {**MINATAR["ppo"], "anneal_ent": True},
    },
    # Space Invaders with the entropy bonus decaying too: seeds 0-2 ended at 699.4, 745.2, 497.2
    # in 261-280 s (the same measure and day; constant: 444.6, 347.3, 367.6, above)
    "minatar-space_invaders": {
        "model": dict(MINATAR["model"]),
        "pqn": dict(MINATAR["pqn"]),
        "ppo": {**MINATAR["ppo"], "anneal_ent": True},
    },
    "cartpole": {
        # core_size: a recurrent core (model.core) as wide as the torso
        "model": {"hidden": 64, "core_size": 64},
        # found by `fasttrain sweep` on the time to mean return 475 (three sweeps, 120 trials):
        # 475 after ~0.7-1 s of training on 2 CPU cores, 500 at the end of the 150k steps (~2 s)
        "ppo": {
            "total_timesteps": 150_000,
            "num_envs": 64,
            "num_steps": 16,
            "num_minibatches": 1,
            "update_epochs": 3,
            "learning_rate": 0.02,
            "gamma": 0.98,
            "ent_coef": 0.0,
        },
        # `fasttrain sweep` on the time to 475 and on the final return, then 8 seeds on 2 busy
        # CPU cores (AMD EPYC): 475 after 0.7-2.3 s of training (median 1.3 s), every seed at 500
        # at the end of the 200k steps (~5 s); q_lambda 0.9 kept the runs that reached 500
        # there, where 0.54-0.74 let 1-3 seeds in 8 fall back to 120-380
        "pqn": {
            "total_timesteps": 200_000,
            "num_envs": 16,  # x 32 steps (the default)
            "num_minibatches": 2,
            "update_epochs": 3,
            "learning_rate": 4.7e-3,
            "gamma": 0.98,
            "q_lambda": 0.9,
            "exploration_fraction": 0.14,
        },
        # passes tests/fasttrain/learners/test_dqn.py's learning test
        "dqn": {
            "num_envs": 16,
            "num_steps": 32,
            "buffer_size": 20_000,
            "train_frequency": 1,
            "batch_size": 128,
            "target_network_frequency": 500,
            "n_step": 3,
            "double_q": True,
        },
    },
}


# The learner a game trains with where no layer names one (run.algo, --algo); PPO elsewhere.
GAME_ALGOS: dict[str, str] = {
    # PQN's preset over 10M steps, seeds 0-2 (2-core AMD EPYC, 2026-11-25, mean of the last
    # twentieth): 77.3, 76.8, 91.4, past pgx PPO's ~54; `bench --learning` 2026-11-26 (bf16,
    # 10-minute budget: 9.2-9.9M steps): 72.4, 74.7, 87.3. PPO's preset ended at 5.2 (seed 0)
    "minatar-seaquest": "pqn",
    # the same measures: 37.3, 27.1, 28.8 and, in 392-415 s, 35.1, 29.9, 28.1, past pgx PPO's
    # 22-25; PPO's preset ended at 14.7 (seed 0)
    "minatar-asterix": "pqn",
}

# Presets for a run on a GPU, laid over the game's own where the run's device is cuda (more
# environments and a larger batch pay there). None is set yet: each needs its time to score
# measured on a GPU (python -m fasttrain.bench.scale, .ci/gpu). The one GPU lease so far (an
# H200, 15 minutes, 2026-11-26) measured the CPU presets there: docs/performance.md.
GPU_DEFAULTS: dict[str, dict[str, dict]] = {}


def preset(game: str, learner: str, device: str = "cpu") -> dict:
    """The tuned settings of ``learner`` (or ``"model"``, or ``"params"``: the game's own
    parameters) on ``game``, with the GPU preset over them on ``device`` cuda; empty when
    there are none."""
    values = GAME_DEFAULTS.get(game, {}).get(learner, {})
    if device == "cuda":
        values = {**values, **GPU_DEFAULTS.get(game, {}).get(learner, {})}
    return values


def preset_source(game: str, learner: str, key: str, device: str = "cpu") -> str:
    """``"snake preset"``, or ``"snake gpu preset"`` for a value the GPU preset sets."""
    gpu = device == "cuda" and key in GPU_DEFAULTS.get(game, {}).get(learner, {})
    return f"{game} gpu preset" if gpu else f"{game} preset"

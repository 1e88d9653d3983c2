"""What ``fasttrain bench`` measures, stage by stage, each filling ``Results`` with the timings
of ``fasttrain.bench.measure``."""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import tempfile

from fasttrain.bench.measure import (
    TRAIN_KEYS,
    bench_baseline,
    bench_compile,
    bench_env,
    bench_gymnasium,
    bench_minatar,
    bench_sb3,
    bench_train,
    progress,
    target_config,
    time_to_target,
)
from fasttrain.bench.plan import (
    FULL_SWEEP,
    PYTHON_MAX_ENVS,
    QUICK_SWEEP,
    SB3_TARGET_GAME,
    TARGETS,
    Plan,
)
from fasttrain.bench.report import (
    SB3_LEARNER,
    Results,
    gpu_memory_note,
    make_row,
    make_target_row,
)

# Extra env-only rows at other game params: (label, num_envs, params). The arena is also timed
# in PufferLib's own Ocean Snake configuration, the work its C Snake is measured on.
PUFFER_ARENA = dict(
    width=640, height=360, num_snakes=256, num_food=4096, vision=5, max_snake_length=1024
)
EXTRA_ENV_ROWS = {"arena": [("PufferLib's configuration (640x360, 256 snakes)", 4, PUFFER_ARENA)]}
# Extra training rows at other settings: (label, algo, config sections over the default config).
# CartPole is also trained with PufferLib 3.0's own CartPole settings, the work its trainer's
# steps/s are measured on (the 10M-step budget only sets run.compile = "auto" and the schedule).
PUFFER_CARTPOLE = {
    "ppo": {
        "total_timesteps": 10_000_000,
        "num_envs": 1024,
        "num_steps": 64,
        "num_minibatches": 8,
        "update_epochs": 1,
    },
    "model": {"hidden": 128, "layers": 1},
}
PUFFER_NAME = (
    "PufferLib 3.0's CartPole settings: 1024 envs, batch 65,536, minibatch 8,192, 1 epoch, "
    "one layer of 128"
)
OVERLAP = {"ppo": {"overlap": True}}  # the next rollout collected while the update runs
EXTRA_TRAIN_ROWS = {
    "cartpole": [
        (PUFFER_NAME, "ppo", PUFFER_CARTPOLE),
        (
            f"{PUFFER_NAME}, ppo.overlap",
            "ppo",
            {**PUFFER_CARTPOLE, "ppo": {**PUFFER_CARTPOLE["ppo"], "overlap": True}},
        ),
    ],
    "snake": [("ppo.overlap", "ppo", OVERLAP)],
}


# ---------------------------------------------------------------- STAGES


def compile_stage(plan: Plan, results: Results, cache: str) -> None:
    """Compile time, cold then warm, in fresh processes sharing the new ``cache``."""
    for game in plan.games:
        for backend in [b for b in plan.backends if b != "python"]:
            progress(f"{game} {backend}: compile time (cold and warm cache)")
            try:
                figures = bench_compile(game, backend, cache, plan.threads)
                results.compiles.append({"game": game, "backend": backend, **figures})
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                results.skip(f"compile {game} {backend}", str(exc))


def env_stage(plan: Plan, results: Results, game: str) -> None:
    """env-only throughput of ``game`` over every backend and num_envs of the sweep."""
    from fasttrain import games

    spec = games.get(game)
    agents = spec.agents(spec.make_params())
    agents_note = f", agent-steps/s ({agents} agents per env)" if spec.agent_game else ""
    unit = "agent-steps/s" if spec.agent_game else "env-steps/s"
    for backend in plan.backends:
        for n in plan.sweep[backend]:
            if backend == "python" and n > PYTHON_MAX_ENVS:
                reason = f"the uncompiled reference runs at most {PYTHON_MAX_ENVS} envs here"
                results.skip(f"env {game} python num_envs={n}", reason)
                continue
            progress(f"{game} {backend} num_envs={n}: {unit}")
            sps, nbytes = bench_env(game, backend, n, plan.repeats, plan.seconds, plan.seed)
            note = "random actions" + agents_note
            if backend == "cuda":
                note += f", {nbytes / 2**20:,.0f} MiB of GPU buffers"
            results.rows.append(make_row(game, "env", backend, n, sps, note, mem_bytes=nbytes))
    for label, n, params in EXTRA_ENV_ROWS.get(game, ()):
        if "cpu" not in plan.backends:
            continue
        progress(f"{game} cpu num_envs={n}, {label}: agent-steps/s")
        sps, nbytes = bench_env(game, "cpu", n, plan.repeats, plan.seconds, plan.seed, params)
        note = f"random actions, agent-steps/s, {label}"
        results.rows.append(make_row(game, "env", "cpu", n, sps, note, mem_bytes=nbytes))


def baseline_stage(plan: Plan, results: Results, game: str) -> None:
    """The per-step baseline of ``game``: the row every fasttrain speedup is measured against."""
    progress(f"{game}: per-step baseline")
    sps = bench_baseline(game, plan.repeats, plan.seconds, plan.seed)
    note = "python backend, 1 env, per-step torch MLP, copy + .item()"
    results.rows.append(make_row(game, "baseline", "python", 1, sps, note))
    if game.startswith("minatar-"):
        minatar_stage(plan, results, game)


def minatar_stage(plan: Plan, results: Results, game: str) -> None:
    """The ``minatar`` package's speed on ``game``, the peer of its env rows, when installed."""
    try:
        import minatar  # noqa: F401
    except ImportError:
        results.skip(f"peer minatar {game}", "minatar is not installed (pip install minatar)")
        return
    progress(f"{game}: the minatar package's own Environment")
    sps = bench_minatar(game, plan.repeats, plan.seconds, plan.seed)
    note = "minatar package Environment.act + state(), 1 env, random actions"
    results.rows.append(make_row(game, "peer", "minatar", 1, sps, note))


def training_stage(plan: Plan, results: Results, game: str) -> None:
    """End-to-end training and the learner-only ceiling of ``game``, per registered learner,
    then PPO with each recurrent core of ``plan.cores``."""
    if game not in plan.train_games:
        return
    for algo in plan.learners:
        train_rows(plan, results, game, algo)
    for core in plan.cores:
        train_rows(plan, results, game, "ppo", core)
    if plan.quick:
        return  # the rows at other settings (PufferLib's) take minutes
    for name, algo, settings in EXTRA_TRAIN_ROWS.get(game, ()):
        train_rows(plan, results, game, algo, settings=(name, settings))


def train_rows(
    plan: Plan,
    results: Results,
    game: str,
    algo: str,
    core: str = "none",
    settings: tuple[str, dict] | None = None,
) -> None:
    """The train row and the ceiling row of ``algo`` on ``game`` (``model.core = core`` unless
    ``"none"``), or a skip note. Rows with a core are labelled ``ppo+lstm``. ``settings``:
    ``(name, config sections)`` of an extra row at other settings than the default config
    (``--train-num-envs`` does not apply to it), named in its note and as ``settings``."""
    from fasttrain.errors import ConfigError, RunError

    device = plan.device.type
    label = algo if core == "none" else f"{algo}+{core}"
    name, sections = settings or ("", None)
    num_envs = None if sections else plan.train_num_envs  # an extra row keeps its own size
    progress(
        f"{game} {device}: {label.upper()} training ({plan.train_iterations} iterations)"
        + (f", {name}" if name else "")
    )
    what = f"train {game}" + ("" if label == "ppo" else f" {label}")  # PPO's name predates DQN
    what += f" ({name})" if name else ""
    try:
        runs = bench_train(
            algo,
            game,
            device,
            plan.train_iterations,
            plan.train_repeats,
            num_envs,
            plan.seed,
            plan.threads,
            core=core,
            sections=sections,
        )
    except ImportError as exc:
        results.skip(what, f"benchmark_training for {algo} not available ({exc})")
        return
    except ConfigError as exc:  # e.g. a default config whose rollout does not fit the core
        results.skip(what, f"the config does not validate: {exc}")
        return
    except Exception as exc:  # a broken trainer fails the bench with its cause, never a skip
        first = (str(exc).splitlines() or [""])[0][:300]
        raise RunError(f"{what} failed: {type(exc).__name__}: {first}") from None
    train = training_row(plan, game, device, algo, core, name, num_envs, runs)
    results.rows.append(train)
    ceiling = ceiling_row(game, device, train, runs, name)
    if ceiling is not None:
        results.rows.append(ceiling)


def training_row(plan: Plan, game, device, algo, core, name, num_envs, runs) -> dict:
    """The ``train`` row of ``runs`` (benchmark_training results): median SPS, the time split."""
    split = {k: statistics.median(r[k] for r in runs) for k in TRAIN_KEYS[1:5]}
    trained = runs[0].get("core", core)  # the model.core trained (a preset may set one)
    label = algo if trained == "none" else f"{algo}+{trained}"
    flops = runs[0].get("flops_per_step")
    gflops = None if flops is None else flops * statistics.median(r["sps"] for r in runs) / 1e9
    return make_row(
        game,
        "train",
        device,
        runs[0].get("num_envs", 0),
        [r["sps"] for r in runs],
        "{}: env {:.0%} fwd {:.0%} learn {:.0%} other {:.0%}{}{}{}{}".format(
            label,
            *split.values(),
            "" if gflops is None else f"; learner {gflops:.1f} GFLOP/s",
            "" if num_envs is None else " (num_envs set)",
            gpu_memory_note(runs[0].get("gpu_mem_bytes")),
            f"; {name}" if name else "",
        ),
        algo=algo,
        core=trained,
        settings=name or "default",
        batch_size=runs[0].get("batch_size"),
        gpu_mem_bytes=runs[0].get("gpu_mem_bytes"),
        iterations=plan.train_iterations,
        flops_per_step=flops,
        learner_gflops=gflops,
        precision=runs[0].get("precision"),
        **split,
    )


def ceiling_row(game, device, train: dict, runs, name) -> dict | None:
    """The ``ceiling`` row: the learner alone, and the share of it training reached (None for
    a learner without a ceiling)."""
    ceilings = [r["ceiling_sps"] for r in runs]
    if not all(math.isfinite(c) for c in ceilings):  # NaN: a learner without a ceiling
        return None
    ids = {k: train[k] for k in ("algo", "core", "settings")}
    label = ids["algo"] if ids["core"] == "none" else f"{ids['algo']}+{ids['core']}"
    ceiling = make_row(game, "ceiling", device, train["num_envs"], ceilings, **ids)
    fraction = train["sps_median"] / ceiling["sps_median"]
    ceiling["fraction_reached"] = fraction
    ceiling["note"] = f"{label}: learner only; training reaches {fraction:.0%}" + (
        f"; {name}" if name else ""
    )
    return ceiling


def peer_stage(plan: Plan, results: Results) -> None:
    """Gymnasium's sync vector env and Stable-Baselines3 PPO on CartPole, when installed."""
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        results.skip("peer gymnasium", "gymnasium is not installed (pip install 'fasttrain[gym]')")
    else:
        # sized like the python reference rows (their default sizes when --backend drops them)
        sizes = plan.sweep.get("python") or (QUICK_SWEEP if plan.quick else FULL_SWEEP)["python"]
        for n in sizes:
            progress(f"peer gymnasium CartPole-v1 sync num_envs={n}")
            sps = bench_gymnasium(n, plan.repeats, plan.seconds, plan.seed)
            note = "make_vec sync, random actions"
            results.rows.append(make_row("CartPole-v1", "peer", "gymnasium-sync", n, sps, note))
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        results.skip(
            "peer stable-baselines3",
            "stable-baselines3 is not installed (pip install 'fasttrain[sb3]')",
        )
    else:
        n_steps = plan.sb3_n_steps
        progress(f"peer stable-baselines3 PPO CartPole-v1 (n_steps={n_steps})")
        sps = bench_sb3(n_steps, plan.repeats, plan.seed)
        note = f"PPO MlpPolicy, DummyVecEnv n_envs=8, n_steps={n_steps}"
        results.rows.append(make_row("CartPole-v1", "peer", "sb3-ppo", 8, sps, note))


def targets_stage(plan: Plan, results: Results) -> None:
    """Training seconds of each game's default config to its targets, seed by seed, and of
    Stable-Baselines3 PPO to the same CartPole return, when installed."""
    if not plan.targets:
        return
    device = plan.device.type
    seeds = [plan.seed + k for k in range(plan.target_seeds)]
    for game in plan.games:
        if game not in plan.target_games:
            reason = (
                "left out with --quick: each run takes minutes (run without --quick)"
                if game in TARGETS
                else f"no target is set for {game}"
            )
            results.skip(f"targets {game}", reason)
    for game, (metric, values) in plan.target_games.items():
        budget = plan.target_budget_s[game]
        wanted = f"{metric} {', '.join(f'{v:g}' for v in values)}"
        runs = []  # per seed, a target_run per value
        try:
            for seed in seeds:
                config = target_config(game, seed, device, plan.threads)
                progress(
                    f"{game} {config.run.algo} seed {seed}: time to {wanted} (<= {budget:g} s)"
                )
                runs.append(time_to_target(config, metric, values, budget))
        except Exception as exc:  # a broken run should not lose the other figures
            results.skip(f"targets {game}", f"the run failed: {exc!r}")
            continue
        learner = config.learner
        note = (
            f"default config: {learner.num_envs} envs, {device}; "
            f"at most {budget:g} s or {learner.total_timesteps:,} steps"
        )
        for k, value in enumerate(values):
            per_seed = [seed_runs[k] for seed_runs in runs]
            row = make_target_row(game, config.run.algo, metric, value, budget, per_seed, note)
            results.targets.append(row)
    if plan.sb3_target is not None:
        sb3_target_stage(plan, results, seeds)


def sb3_target_stage(plan: Plan, results: Results, seeds: list[int]) -> None:
    """Stable-Baselines3 PPO with RL-Zoo's CartPole-v1 settings to ``plan.sb3_target``."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        reason = "stable-baselines3 is not installed (pip install 'fasttrain[sb3]')"
        results.skip("targets stable-baselines3", reason)
        return
    import torch

    from fasttrain.bench.sb3_target import ZOO_N_ENVS, ZOO_N_TIMESTEPS, sb3_time_to_target

    torch.set_num_threads(plan.threads)  # a trainer built before may have taken every core
    budget = plan.target_budget_s["sb3"]
    runs = []
    try:
        for seed in seeds:
            progress(
                f"stable-baselines3 PPO CartPole-v1 seed {seed}: time to return "
                f"{plan.sb3_target:g} (<= {budget:g} s)"
            )
            runs.append(sb3_time_to_target(plan.sb3_target, seed, budget))
    except Exception as exc:  # a broken peer should not lose the other figures
        results.skip("targets stable-baselines3", f"the run failed: {exc!r}")
        return
    note = (
        f"RL-Zoo settings: {ZOO_N_ENVS} envs, cpu; at most {budget:g} s or "
        f"{ZOO_N_TIMESTEPS:,} steps; mean over each rollout's episodes"
    )
    row = make_target_row(
        "CartPole-v1",
        SB3_LEARNER,
        "return",
        plan.sb3_target,
        budget,
        runs,
        note,
        sb3_game=SB3_TARGET_GAME,  # the fasttrain game whose row it is compared with
    )
    results.targets.append(row)


def run_stages(plan: Plan) -> Results:
    """Every stage of the plan in order: compile, then per game env, baseline and training,
    then the peers, then the time-to-target runs. The compile stage times a new cache, which
    the stages after it reuse and which is removed at the end; without it (``--quick``) every
    stage runs on the usual cache, warm from earlier runs (a new one would only add a cold
    compile before the first timing). With ``targets_only`` only the last stage runs, on the
    usual cache (compiling is outside its timings)."""
    results = Results()
    cache = tempfile.mkdtemp(prefix="fasttrain-bench-cache-")
    previous_cache = os.environ.get("FASTTRAIN_CACHE_DIR")
    try:
        if not plan.targets_only:
            if plan.compile_times:
                compile_stage(plan, results, cache)
                # this process reuses the cache just filled, so no compile lands in a timing
                os.environ["FASTTRAIN_CACHE_DIR"] = cache
            else:
                results.skip("compile", "cold and warm compile times: left out with --quick")
            for game in plan.games:
                env_stage(plan, results, game)
                baseline_stage(plan, results, game)
                training_stage(plan, results, game)
            peer_stage(plan, results)
        targets_stage(plan, results)
    finally:
        if previous_cache is None:
            os.environ.pop("FASTTRAIN_CACHE_DIR", None)
        else:
            os.environ["FASTTRAIN_CACHE_DIR"] = previous_cache
        shutil.rmtree(cache, ignore_errors=True)
    return results

"""How ``fasttrain bench`` times one thing: the env step, the per-step baseline, a peer
library, the first step of a fresh process, a training iteration, a run to a target.

Every figure is the median of ``repeats`` timed runs after a warm-up; compilation stays out of
the timings and is measured on its own, in fresh subprocesses.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import click

from fasttrain.bench.report import target_run

ACTION_POOL_BYTES = 16 << 20  # random actions drawn beforehand and cycled, at most this much
TRAIN_KEYS = ("sps", "time_env", "time_forward", "time_learn", "time_other", "ceiling_sps")

# Time to first step of a fresh process; run with FASTTRAIN_CACHE_DIR set by the caller.
_FIRST_STEP = r"""
import json, sys, time
start = time.perf_counter()
import fasttrain
imported = time.perf_counter()
env = fasttrain.make(sys.argv[1], num_envs=int(sys.argv[3]), backend=sys.argv[2], seed=0)
env.step(env.actions)  # the zeroed action buffer holds valid actions
env.synchronize()
print(json.dumps({"import_s": imported - start, "first_step_s": time.perf_counter() - imported}))
"""


def progress(text: str) -> None:
    """Say on stderr what is being measured now."""
    click.echo(f"bench: {text}", err=True)


def time_repeats(run, steps_per_call: int, repeats: int, seconds: float, sync=lambda: None):
    """env-steps/s of ``repeats`` timed runs of about ``seconds`` each, after a warm-up.

    ``run(n)`` makes ``n`` calls that each advance ``steps_per_call`` env-steps.
    """
    run(1)  # warm-up: first-call costs (caches, lazy allocation) stay out of the timings
    sync()
    calls, elapsed = 1, 0.0
    while elapsed < seconds / 4:  # calibrate the number of calls per repeat
        start = time.perf_counter()
        run(calls)
        sync()
        elapsed = time.perf_counter() - start
        if elapsed < seconds / 4:
            calls *= 2
    per_repeat = max(1, round(calls * seconds / max(elapsed, 1e-9)))
    sps = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(per_repeat)
        sync()
        sps.append(per_repeat * steps_per_call / (time.perf_counter() - start))
    return sps


def bench_env(
    game: str, backend: str, num_envs: int, repeats: int, seconds: float, seed=0, params=None
):
    """Agent-steps/s (env-steps/s for one agent per env) of ``VecEnv.step`` with pre-drawn
    random actions, and the env's buffer bytes. ``params``: game params (default: defaults).

    The actions are in range by construction, so the step skips the host-side range check that
    would cost a synchronisation per step on cuda (the CPU backends check inside the kernel).
    """
    import torch

    import fasttrain

    env = fasttrain.make(game, num_envs=num_envs, backend=backend, seed=seed, **(params or {}))
    rows = max(8, min(1024, ACTION_POOL_BYTES // (8 * env.num_rows)))
    generator = torch.Generator().manual_seed(seed)
    pool = torch.randint(0, env.num_actions, (rows, env.num_rows), generator=generator)
    pool = pool.to(env.device)
    cursor = [0]

    def run(n):
        i = cursor[0]
        for _ in range(n):
            env.step(pool[i], check=False)
            i = (i + 1) % rows
        cursor[0] = i

    sps = time_repeats(run, env.num_rows, repeats, seconds, env.synchronize)
    return sps, env.nbytes


def baseline_policy(obs_shape, num_actions: int):
    """The small MLP of the per-step baseline: Flatten, Linear(obs, 64), ReLU, Linear(64, A)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(math.prod(obs_shape), 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, num_actions),
    )


def bench_baseline(game: str, repeats: int, seconds: float, seed=0):
    """Steps/s of one python-backend env driven step by step, the way older trainers did."""
    import numpy as np
    import torch

    import fasttrain

    env = fasttrain.make(game, num_envs=1, backend="python", seed=seed)
    policy = baseline_policy(env.obs_shape, env.num_actions)
    state = {"obs": env.obs.numpy()}

    def run(n):
        obs = state["obs"]
        for _ in range(n):
            x = torch.as_tensor(obs.copy(), dtype=torch.float32)
            with torch.no_grad():
                logits = policy(x)
            actions = torch.distributions.Categorical(logits=logits).sample()
            next_obs, reward, terminated, truncated = env.step(np.array(actions.tolist()))
            reward.sum().item(), terminated.any().item(), truncated.any().item()
            obs = next_obs.numpy()
        state["obs"] = obs

    return time_repeats(run, env.num_rows, repeats, seconds)


def bench_minatar(game: str, repeats: int, seconds: float, seed=0):
    """Steps/s of the ``minatar`` package's own ``Environment`` (one env, random actions from
    its full set, reset on terminal), each step with its observation (``state()``), as an agent
    needs it: the original every MinAtar port is measured against."""
    import minatar
    import numpy as np

    env = minatar.Environment(game.removeprefix("minatar-"))
    env.seed(seed)
    env.reset()
    actions = np.random.default_rng(seed).integers(0, 6, 4096).tolist()
    cursor = [0]

    def run(n):
        i = cursor[0]
        for _ in range(n):
            _, terminal = env.act(actions[i])
            if terminal:
                env.reset()
            env.state()
            i = (i + 1) % len(actions)
        cursor[0] = i

    return time_repeats(run, 1, repeats, seconds)


def bench_compile(game: str, backend: str, cache: str, threads: int) -> dict:
    """Time to first step in a fresh process: cold (empty cache), then warm (cache filled)."""
    environ = dict(os.environ, FASTTRAIN_CACHE_DIR=cache, NUMBA_NUM_THREADS=str(threads))
    out = {}
    for label in ("cold", "warm"):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_STEP, game, backend, "8"],
            env=environ,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{label} subprocess failed: {tail}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        out[f"{label}_first_step_s"] = figures["first_step_s"]
        out[f"{label}_import_s"] = figures["import_s"]
    return out


def bench_train(
    algo: str,
    game: str,
    device: str,
    iterations: int,
    repeats: int,
    num_envs=None,
    seed=0,
    threads=None,
    core: str = "none",
    sections: dict | None = None,
):
    """Results of ``repeats`` calls of ``benchmark_training`` for ``algo`` (each warms up),
    with ``model.core = core`` unless it is ``"none"`` and config ``sections`` laid over."""
    from fasttrain.bench.training import benchmark_training

    results = []
    for _ in range(repeats):
        result = benchmark_training(
            algo,
            game,
            device,
            iterations,
            num_envs=num_envs,
            seed=seed,
            threads=threads,
            core=core,
            sections=sections,
        )
        missing = [key for key in TRAIN_KEYS if key not in result]
        if missing:
            raise KeyError(f"benchmark_training returned no {', '.join(missing)}")
        results.append(result)
    return results


def bench_gymnasium(num_envs: int, repeats: int, seconds: float, seed=0):
    """env-steps/s of Gymnasium's CartPole-v1 sync vector env with pre-drawn random actions."""
    import gymnasium
    import numpy as np

    envs = gymnasium.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
    envs.reset(seed=seed)
    rows = max(8, min(1024, ACTION_POOL_BYTES // (8 * num_envs)))
    pool = np.random.default_rng(seed).integers(0, 2, (rows, num_envs))
    cursor = [0]

    def run(n):
        i = cursor[0]
        for _ in range(n):
            envs.step(pool[i])
            i = (i + 1) % rows
        cursor[0] = i

    try:
        return time_repeats(run, num_envs, repeats, seconds)
    finally:
        envs.close()


def bench_sb3(n_steps: int, repeats: int, seed=0, n_envs=8):
    """Steps/s of Stable-Baselines3 PPO (default MlpPolicy) on CartPole, one rollout+update each."""
    import gymnasium
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(n_envs)])
    model = PPO("MlpPolicy", venv, n_steps=n_steps, device="cpu", seed=seed, verbose=0)
    batch = n_steps * n_envs
    model.learn(batch)  # warm-up iteration
    sps = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.learn(batch, reset_num_timesteps=False)
        sps.append(batch / (time.perf_counter() - start))
    venv.close()
    return sps


def target_config(game: str, seed: int, device: str, threads: int):
    """The default config of ``game`` (its tuned presets) for a time-to-target run, quiet."""
    from fasttrain.config import resolve as cfg

    # threads are the bench's, not a learning setting: the trainer would take every core
    settings = {"seed": seed, "device": device, "torch_threads": threads, "numba_threads": threads}
    log = {"interval_s": 1e9, "progress": False}
    return cfg.build([("bench", {"game": {"name": game}, "run": settings, "log": log})])


def time_to_target(config, metric: str, values, budget_s: float) -> list[dict]:
    """One run of ``config`` until the mean ``metric`` has reached every one of ``values``, it
    has trained ``budget_s`` seconds, or it ends at its total_timesteps: a ``target_run`` per
    value."""
    from fasttrain.run.runner import run
    from fasttrain.targets import Target, watch

    targets = [Target(metric, value) for value in values]
    reached_all = watch(*targets)
    trained = [0.0]  # training seconds at the last metrics row

    def on_row(row: dict) -> bool:
        trained[0] = float(row["time_s"])
        return reached_all(row) or trained[0] >= budget_s

    with tempfile.TemporaryDirectory(prefix="fasttrain-bench-target-") as folder:
        out = os.path.join(folder, "run")
        summary = run(config, out=out, echo=lambda *_, **__: None, on_row=on_row)
    if all(t.reached for t in targets):
        ended = "target"
    elif trained[0] >= budget_s:
        ended = "budget"
    else:
        ended = "total_timesteps"
    steps, seed = summary["global_step"], config.run.seed
    return [
        target_run(seed, t.seconds, t.steps, t.best, t.last, trained[0], steps, ended)
        for t in targets
    ]

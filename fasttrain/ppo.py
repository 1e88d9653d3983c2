"""PPO, CleanRL-style, reading the environment buffers without copies.

The environment writes each step's observations straight into the rollout storage slot
``obs[t + 1]`` (and final observations of ended episodes into ``final_obs[t]``), so the learner
never gathers or copies experience. Truncated steps bootstrap from the value of ``final_obs``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import fasttrain
from fasttrain.config import Config, ConfigError, PPOConfig
from fasttrain.kernels.cuda import device_args
from fasttrain.kernels.gae import gae_cpu, gae_cuda
from fasttrain.policy import make_policy

__all__ = ["PPOConfig", "Trainer", "train", "benchmark_training", "learner_ceiling"]


# ------------------------------------------------------------------------------- SETUP


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when usable, else cpu; ``cuda`` without a GPU fails with one line."""
    from fasttrain.kernels import cuda_available
    from fasttrain.kernels.cuda import cuda_problem, simulator

    if name == "auto":
        name = "cuda" if cuda_available() and torch.cuda.is_available() else "cpu"
    if name == "cuda":
        problem = cuda_problem()
        if problem is None and simulator():
            problem = "the CUDA simulator runs environments only; the learner needs a real GPU"
        elif problem is None and not torch.cuda.is_available():
            problem = "torch was built without CUDA; install a CUDA build of torch"
        if problem:
            raise ConfigError(f"device 'cuda' is not available: {problem}")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda")
    return torch.device(name)


def setup_threads(run) -> None:
    """Set torch and Numba thread counts (0 means one per core) and GPU math modes."""
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(run.torch_threads or cores)
    numba.set_num_threads(min(run.numba_threads or cores, numba.config.NUMBA_NUM_THREADS))
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


def maybe_compile(policy, mode: str, example: torch.Tensor, warn=print):
    """``torch.compile`` the policy; on any failure warn once and return it uncompiled."""
    if mode == "off":
        return policy
    try:
        compiled = torch.compile(policy, mode=None if mode == "default" else mode)
        with torch.inference_mode():
            compiled(example)
        return compiled
    except Exception as exc:  # compilation needs a compiler toolchain; never fatal
        warn(f"warning: torch.compile({mode}) failed, running eagerly: {type(exc).__name__}")
        return policy


def load_env_state(trainer, state: dict) -> None:
    """Check a checkpoint against ``trainer``'s device and env, then restore the env buffers."""
    saved = state.get("device", "cpu")
    if saved != trainer.device.type:
        raise ConfigError(
            f"checkpoint was written on device {saved!r} and this run is on "
            f"{trainer.device.type!r}; resume it with run.device = {saved!r}"
        )
    try:
        trainer.env.core.load_state_dict(state["env"])
    except ValueError as exc:
        raise ConfigError(f"checkpoint does not fit this run: {exc}") from None


def start_run(config: Config, num_envs: int):
    """Setup shared by the learners: device, threads, seeds, the environments, precision.

    Returns ``(device, generator, env, amp_dtype, scaler)``; every check runs before any work.
    """
    run = config.run
    device = resolve_device(run.device)
    if run.amp == "fp16" and device.type != "cuda":
        raise ConfigError("run.amp = 'fp16' needs device cuda; use 'bf16' on the CPU")
    setup_threads(run)
    torch.manual_seed(run.seed)
    generator = torch.Generator(device=device).manual_seed(run.seed)
    backend = "cuda" if device.type == "cuda" else "cpu"
    env = fasttrain.make(config.game.name, num_envs=num_envs, backend=backend, seed=run.seed,
                         **vars(config.game_params()))  # fmt: skip
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.amp)
    scaler = torch.amp.GradScaler("cuda") if run.amp == "fp16" else None
    return device, generator, env, amp_dtype, scaler


@dataclass
class Timers:
    """Seconds spent per phase since the last ``reset``."""

    env: float = 0.0
    forward: float = 0.0
    learn: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def split(self) -> dict:
        total = max(time.perf_counter() - self.start, 1e-9)
        parts = {"env": self.env, "forward": self.forward, "learn": self.learn}
        parts["other"] = max(total - sum(parts.values()), 0.0)
        return {k: v / total for k, v in parts.items()}

    def reset(self):
        self.env = self.forward = self.learn = 0.0
        self.start = time.perf_counter()


class Trainer:
    """Holds the environment, network, optimizer and rollout storage of one PPO run."""

    def __init__(self, config: Config, warn=print):
        self.config = config
        self.args = args = config.learner("ppo")
        run = config.run
        self.device, self.generator, self.env, self.amp_dtype, self.scaler = start_run(
            config, args.num_envs
        )
        env = self.env
        self.policy = make_policy(env.obs_shape, env.obs_dtype, env.num_actions, config.model,
                                  self.device)  # fmt: skip
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=args.learning_rate, eps=1e-5)
        self.batch_size = args.num_envs * args.num_steps
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.batch_size)
        self.iteration = 0
        self.global_step = 0

        # time-major storage, allocated once; obs[t + 1] and final_obs[t] are written by the env
        T, N, dev = args.num_steps, args.num_envs, self.device
        self.obs = torch.zeros((T + 1, N, *env.obs_shape), dtype=env.obs_dtype, device=dev)
        self.final_obs = torch.zeros((T, N, *env.obs_shape), dtype=env.obs_dtype, device=dev)
        self.actions = torch.zeros((T, N), dtype=torch.int64, device=dev)
        self.logprobs, self.values, self.rewards, self.final_values, self.advantages, \
            self.returns = (torch.zeros((T, N), device=dev) for _ in range(6))  # fmt: skip
        self.terminated = torch.zeros((T, N), dtype=torch.bool, device=dev)
        self.truncated = torch.zeros((T, N), dtype=torch.bool, device=dev)
        self.last_values = torch.zeros(N, device=dev)
        self._gae_cuda_args = None  # gae_cuda's device arrays, converted once
        self.obs[0].copy_(env.obs)
        self.act_policy = maybe_compile(self.policy, run.compile, self.obs[0], warn)
        self.timers = Timers()

    # --------------------------------------------------------------------------- ROLLOUT

    def rollout(self) -> None:
        env, args, timers = self.env, self.args, self.timers
        with torch.inference_mode():
            for t in range(args.num_steps):
                t0 = time.perf_counter()
                logits, value = self.act_policy(self.obs[t])
                gumbel = -torch.log(-torch.log(torch.rand(logits.shape, generator=self.generator,
                                                          device=self.device)))  # fmt: skip
                action = torch.argmax(logits + gumbel, dim=1)  # a sample of softmax(logits)
                self.logprobs[t] = F.log_softmax(logits, dim=1).gather(1, action[:, None])[:, 0]
                self.actions[t] = action
                self.values[t] = value
                t1 = time.perf_counter()
                # actions come from an argmax over num_actions logits, so they are in range:
                # skip the check that would cost a host sync per step on cuda
                env.step(
                    action, obs_out=self.obs[t + 1], final_obs_out=self.final_obs[t], check=False
                )
                self.rewards[t] = env.rewards
                self.terminated[t] = env.terminated
                self.truncated[t] = env.truncated
                t2 = time.perf_counter()
                timers.forward += t1 - t0
                timers.env += t2 - t1
        self.global_step += args.num_steps * args.num_envs

    # --------------------------------------------------------------------------- ADVANTAGES

    def compute_advantages(self) -> None:
        args = self.args
        t0 = time.perf_counter()
        with torch.inference_mode():
            self.last_values.copy_(self.act_policy(self.obs[-1])[1])
            self.final_values.zero_()
            rows = self.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            if rows[0].numel():
                self.final_values[rows] = self.policy.value(self.final_obs[rows])
        if self.device.type == "cpu":
            gae_cpu(
                self.rewards.numpy(),
                self.values.numpy(),
                self.last_values.numpy(),
                self.final_values.numpy(),
                self.terminated.numpy(),
                self.truncated.numpy(),
                args.gamma,
                args.gae_lambda,
                self.advantages.numpy(),
                self.returns.numpy(),
            )
        else:  # numba reads torch's CUDA tensors through __cuda_array_interface__, no copy
            if self._gae_cuda_args is None:
                self._gae_cuda_args = device_args((
                    self.rewards, self.values, self.last_values, self.final_values,
                    self.terminated, self.truncated, args.gamma, args.gae_lambda,
                    self.advantages, self.returns,
                ))  # fmt: skip
            stream = torch.cuda.current_stream(self.device).cuda_stream
            gae_cuda(*self._gae_cuda_args, stream=stream)
        self.timers.forward += time.perf_counter() - t0

    # --------------------------------------------------------------------------- UPDATE

    def update(self) -> dict:
        args, policy = self.args, self.policy
        t0 = time.perf_counter()
        if args.anneal_lr:
            frac = 1.0 - self.iteration / self.num_iterations
            self.optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        b_obs = self.obs[:-1].reshape(self.batch_size, *self.env.obs_shape)
        b_actions = self.actions.reshape(-1)
        b_logprobs = self.logprobs.reshape(-1)
        b_advantages = self.advantages.reshape(-1)
        b_returns = self.returns.reshape(-1)
        b_values = self.values.reshape(-1)
        losses = torch.zeros(5, device=self.device)  # pg, v, entropy, approx_kl, clipfrac
        updates = 0
        for _epoch in range(args.update_epochs):
            order = torch.randperm(self.batch_size, generator=self.generator, device=self.device)
            for start in range(0, self.batch_size, self.minibatch_size):
                mb = order[start : start + self.minibatch_size]
                with torch.autocast(self.device.type, self.amp_dtype or torch.float32,
                                    enabled=self.amp_dtype is not None):  # fmt: skip
                    logits, new_values = policy(b_obs[mb])
                logits, new_values = logits.float(), new_values.float()
                log_probs = F.log_softmax(logits, dim=1)
                new_logprob = log_probs.gather(1, b_actions[mb][:, None])[:, 0]
                entropy = -(log_probs.exp() * log_probs).sum(1).mean()
                log_ratio = new_logprob - b_logprobs[mb]
                ratio = log_ratio.exp()
                mb_adv = b_advantages[mb]
                if args.norm_adv:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio, -mb_adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                ).mean()
                if args.clip_vloss:
                    clipped = b_values[mb] + (new_values - b_values[mb]).clamp(
                        -args.clip_coef, args.clip_coef
                    )
                    v_loss = 0.5 * torch.max((new_values - b_returns[mb]) ** 2,
                                             (clipped - b_returns[mb]) ** 2).mean()  # fmt: skip
                else:
                    v_loss = 0.5 * ((new_values - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss

                self.optimizer.zero_grad(set_to_none=True)
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                    self.optimizer.step()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()
                    clipfrac = ((ratio - 1).abs() > args.clip_coef).float().mean()
                    losses += torch.stack([pg_loss, v_loss, entropy, approx_kl, clipfrac]).detach()
                updates += 1
            if args.target_kl > 0 and float(approx_kl) > args.target_kl:  # one sync per epoch
                break
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        means = (losses / updates).tolist()
        names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
        return {f"losses/{k}": v for k, v in zip(names, means, strict=True)}

    def iterate(self) -> dict:
        """One rollout, advantage pass and update; returns the update's losses."""
        self.rollout()
        self.compute_advantages()
        losses = self.update()
        self.obs[0].copy_(self.obs[-1])  # the next rollout starts where this one ended
        return losses

    # --------------------------------------------------------------------------- STATE

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit."""
        return {
            "global_step": self.global_step,
            "iteration": self.iteration,
            "model": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "env": self.env.core.state_dict(),
            "device": self.device.type,
            "next_obs": self.obs[0].cpu().clone(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        load_env_state(self, state)  # checked first: nothing changes on a mismatch
        self.global_step = state["global_step"]
        self.iteration = state["iteration"]
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs[0].copy_(state["next_obs"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])


def train(config: Config, out=None, resume=None, **kwargs) -> dict:
    """Train PPO with ``config``; see ``fasttrain.runner.run`` for the run directory."""
    from fasttrain.runner import run

    return run(config, out=out, resume=resume, **kwargs)


# ------------------------------------------------------------------------------- BENCHMARK


def learner_ceiling(trainer: Trainer, updates: int = 8) -> float:
    """Samples/s of the update alone (forward, backward, optimizer step) on random data."""
    args = trainer.args
    env = trainer.env
    shape = (trainer.minibatch_size, *env.obs_shape)
    if env.obs_dtype == torch.uint8:
        obs = torch.randint(0, 2, shape, dtype=torch.uint8, device=trainer.device)
    else:
        obs = torch.randn(shape, device=trainer.device)
    actions = torch.randint(0, env.num_actions, (trainer.minibatch_size,), device=trainer.device)
    returns = torch.randn(trainer.minibatch_size, device=trainer.device)

    def one_update():
        with torch.autocast(trainer.device.type, trainer.amp_dtype or torch.float32,
                            enabled=trainer.amp_dtype is not None):  # fmt: skip
            logits, values = trainer.policy(obs)
        logits, values = logits.float(), values.float()
        log_probs = F.log_softmax(logits, dim=1)
        loss = -log_probs.gather(1, actions[:, None]).mean() + ((values - returns) ** 2).mean()
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainer.policy.parameters(), args.max_grad_norm)
        trainer.optimizer.step()

    one_update()
    start = time.perf_counter()
    for _ in range(updates):
        one_update()
    seconds_per_update = (time.perf_counter() - start) / updates
    # a batch of minibatch_size * num_minibatches steps costs update_epochs * num_minibatches
    return trainer.minibatch_size / (seconds_per_update * args.update_epochs)


def benchmark_training(game: str, device: str = "cpu", iterations: int = 3,
                       num_envs: int | None = None, seed: int = 0) -> dict:  # fmt: skip
    """End-to-end PPO SPS with the game's default config, its time split and learner ceiling."""
    overrides = {"game": {"name": game}, "run": {"device": device, "seed": seed}}
    if num_envs is not None:
        overrides["game"][game] = {"ppo": {"num_envs": num_envs}}
    config = fasttrain.config.load(overrides=overrides)
    return measure_training(Trainer(config, warn=lambda *_: None), iterations, learner_ceiling)


def measure_training(trainer, iterations: int, ceiling) -> dict:
    """Time ``iterations`` iterations after one warm-up; the split and ``ceiling(trainer)``."""
    cuda = trainer.device.type == "cuda"
    trainer.iterate()  # warm-up: compile and allocate outside the timing
    trainer.timers.reset()
    if cuda:
        torch.cuda.synchronize(trainer.device)
        torch.cuda.reset_peak_memory_stats(trainer.device)
    start, step0 = time.perf_counter(), trainer.global_step
    for _ in range(iterations):
        trainer.iterate()
    if cuda:
        torch.cuda.synchronize(trainer.device)
    elapsed = time.perf_counter() - start
    split = trainer.timers.split()  # on cuda: host time per phase, a rough split
    env_bytes = sum(a.nbytes for a in trainer.env.core.arrays.values())
    return {
        "sps": (trainer.global_step - step0) / elapsed,
        **{f"time_{k}": v for k, v in split.items()},
        "ceiling_sps": ceiling(trainer),
        "num_envs": trainer.args.num_envs,
        "batch_size": trainer.batch_size,
        # GPU memory: the env's CuPy buffers plus torch's peak (storage, model, activations)
        "gpu_mem_bytes": env_bytes + torch.cuda.max_memory_allocated(trainer.device)
        if cuda
        else None,
    }

"""PPO's settings, torch-free: the ``[ppo]`` config dataclass (a docstring per field: the
defaults, the CLI help and the docs), its checks, and what the registry declares for PPO. The
trainer is ``fasttrain.learners.ppo``; a config is checked without importing it."""

from __future__ import annotations

from dataclasses import dataclass

from fasttrain.config.choices import check_counts, check_optimizer
from fasttrain.errors import ConfigError

# run.compile = "auto" compiles PPO where it pays (docs/performance.md#torchcompile)
AUTO_COMPILE = True
# the settings a population's members may differ in (learners/population.py): learner scalars
# that change no buffer, network or kernel
POPULATION_VARIABLE = (
    "learning_rate",
    "ent_coef",
    "vf_coef",
    "clip_coef",
    "max_grad_norm",
    "gamma",
    "gae_lambda",
)
# the console line's names of PPO's loss columns
SHORT_NAMES = {
    "losses/policy_loss": "pg",
    "losses/value_loss": "v",
    "losses/entropy": "ent",
    "losses/approx_kl": "kl",
    "losses/clipfrac": "clip",
}


@dataclass(frozen=True)
class PPOConfig:
    total_timesteps: int = 5_000_000
    """environment steps to train for (--steps); agent steps in games with several agents"""
    num_envs: int = 256
    """parallel environments"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """learning rate of the optimizer"""
    optimizer: str = "adam"
    """adam | muon: muon steps the hidden weight matrices with torch.optim.Muon (torch >= 2.9)
    and the rest with Adam"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE trace decay"""
    num_minibatches: int = 8
    """minibatches per epoch (batch = num_envs * num_steps must divide evenly)"""
    update_epochs: int = 2
    """passes over each batch"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """policy ratio clipping"""
    clip_vloss: bool = True
    """clip the value loss as in the PPO paper"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    anneal_ent: bool = False
    """decay ent_coef linearly to 0 over total_timesteps, as anneal_lr does the learning rate:
    exploration early, a sharper policy late"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient norm clipping"""
    target_kl: float = 0.0
    """stop an update early when the approximate KL exceeds this (0: never)"""
    bptt_horizon: int = 16
    """steps per sequence a recurrent policy (model.core) replays in the update, from the
    state stored at its first step; divides num_steps"""
    overlap: bool = False
    """collect the next rollout, in a second thread, with the weights from before each update
    while the update runs: one iteration of policy lag, corrected by the decoupled objective
    (ppo.decoupled); measured in docs/training.md"""
    decoupled: bool = True
    """with ppo.overlap: clip the ratio against the weights the update starts from (the proximal
    policy, one extra forward pass over the batch) and weight each sample by proximal over
    behaviour probability, capped at 2 (Hilton et al. 2021, decoupled PPO); false: clip against
    the lagged behaviour policy, as plain PPO would (measured to collapse at a high learning
    rate)"""
    max_minibatch_size: int = 0
    """gradient accumulation (PufferLib's name): a minibatch larger than this many samples is
    processed in chunks of this size whose gradients add up before one optimizer step, with the
    same result as the whole minibatch (0: never split); divides the minibatch size"""


def validate(ppo: PPOConfig, where: str = "ppo") -> None:
    """Ranges and sizes of a PPO config; raise ConfigError with one line."""
    positive = (
        "total_timesteps",
        "num_envs",
        "num_steps",
        "num_minibatches",
        "update_epochs",
        "bptt_horizon",
    )
    check_counts(ppo, positive, where)
    batch = ppo.num_envs * ppo.num_steps
    if batch % ppo.num_minibatches:
        raise ConfigError(
            f"{where}: batch num_envs*num_steps = {batch} does not split into "
            f"{where}.num_minibatches = {ppo.num_minibatches} equal minibatches"
        )
    for key in ("gamma", "gae_lambda"):
        if not 0.0 <= getattr(ppo, key) <= 1.0:
            raise ConfigError(f"{where}.{key} must be in [0, 1], got {getattr(ppo, key)}")
    for key in ("learning_rate", "clip_coef", "max_grad_norm"):
        if getattr(ppo, key) <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {getattr(ppo, key)}")
    if ppo.learning_rate > 10:  # Adam's first step would overflow float32 long before 1e38
        raise ConfigError(f"{where}.learning_rate must be in (0, 10], got {ppo.learning_rate}")
    if ppo.max_minibatch_size < 0:
        raise ConfigError(f"{where}.max_minibatch_size must be >= 0, got {ppo.max_minibatch_size}")
    minibatch = batch // ppo.num_minibatches  # per agent: agents multiply both sides
    if 0 < ppo.max_minibatch_size < minibatch and minibatch % ppo.max_minibatch_size:
        raise ConfigError(
            f"{where}: minibatches of {minibatch} samples (num_envs * num_steps / num_minibatches)"
            f" do not split into chunks of {where}.max_minibatch_size = {ppo.max_minibatch_size};"
            " choose a divisor of it, or 0"
        )
    for key in ("ent_coef", "vf_coef", "target_kl"):
        if getattr(ppo, key) < 0:
            raise ConfigError(f"{where}.{key} must be >= 0, got {getattr(ppo, key)}")
    check_optimizer(ppo.optimizer, where)


def check_model(ppo: PPOConfig, model, where: str = "ppo") -> None:
    """A recurrent core's sizes against the rollout: whole sequences of ``bptt_horizon`` steps
    per rollout, split evenly into minibatches."""
    if model.core == "none":
        return
    if ppo.num_steps % ppo.bptt_horizon:
        raise ConfigError(
            f"{where}.num_steps = {ppo.num_steps} does not split into sequences of "
            f"{where}.bptt_horizon = {ppo.bptt_horizon} steps (model.core = {model.core!r}); "
            "make bptt_horizon divide num_steps"
        )
    sequences = ppo.num_steps // ppo.bptt_horizon * ppo.num_envs
    if sequences % ppo.num_minibatches:
        raise ConfigError(
            f"{where}: {sequences} sequences per rollout (num_envs * num_steps / bptt_horizon) "
            f"do not split into {where}.num_minibatches = {ppo.num_minibatches} equal minibatches"
        )
    per = sequences // ppo.num_minibatches
    if 0 < ppo.max_minibatch_size < per * ppo.bptt_horizon:  # chunks of whole sequences
        chunk = ppo.max_minibatch_size // ppo.bptt_horizon
        if chunk < 1 or per % chunk:
            raise ConfigError(
                f"{where}.max_minibatch_size = {ppo.max_minibatch_size} must hold a whole number "
                f"of {where}.bptt_horizon = {ppo.bptt_horizon}-step sequences dividing the "
                f"{per} sequences of a minibatch (model.core = {model.core!r})"
            )


def population_problem(config) -> str | None:
    """None where ``config``'s PPO can train as a population (``learners/population.py``),
    else why not (one line)."""
    args = config.learner
    if args.overlap:
        return "a population does not overlap its rollouts: ppo.overlap = false"
    if args.target_kl > 0:
        return "a population's members stop their epochs together: ppo.target_kl = 0"
    if 0 < args.max_minibatch_size < args.num_envs * args.num_steps // args.num_minibatches:
        return "a population's minibatches are whole: ppo.max_minibatch_size = 0"
    return None

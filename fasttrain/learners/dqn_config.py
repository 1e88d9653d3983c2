"""DQN's settings, torch-free: the ``[dqn]`` config dataclass (a docstring per field: the
defaults, the CLI help and the docs), its checks, and what the registry declares for DQN. The
trainer is ``fasttrain.learners.dqn``; a config is checked without importing it."""

from __future__ import annotations

from dataclasses import dataclass

from fasttrain.config.choices import check_counts, check_optimizer
from fasttrain.errors import ConfigError

LOSSES = ("huber", "mse")  # the TD losses
AUTO_COMPILE = False  # run.compile = "auto" leaves DQN eager: compiling it was not measured faster
# the console line's names of DQN's columns
SHORT_NAMES = {"losses/td_loss": "td", "losses/q_values": "q", "charts/epsilon": "eps"}


@dataclass(frozen=True)
class DQNConfig:
    total_timesteps: int = 500_000
    """environment steps to train for (--steps); agent steps in games with several agents"""
    num_envs: int = 128
    """parallel environments"""
    num_steps: int = 64
    """vectorised steps per iteration (the unit of logging and run.checkpoint_interval)"""
    buffer_size: int = 100_000
    """replay capacity in transitions (rounded down to whole steps of num_envs envs)"""
    learning_starts: int = 10_000
    """environment steps of random-ish acting before the first update"""
    train_frequency: int = 4
    """vectorised steps between updates (each adds num_envs transitions; divides num_steps)"""
    gradient_steps: int = 1
    """gradient steps per update"""
    batch_size: int = 256
    """transitions sampled per gradient step"""
    learning_rate: float = 2.5e-4
    """learning rate of the optimizer"""
    optimizer: str = "adam"
    """adam | muon: muon steps the hidden weight matrices with torch.optim.Muon (torch >= 2.9)
    and the rest with Adam"""
    gamma: float = 0.99
    """discount factor"""
    target_network_frequency: int = 10_000
    """environment steps between target network updates"""
    tau: float = 1.0
    """target update rate (1: copy the online network)"""
    start_e: float = 1.0
    """exploration epsilon at the start"""
    end_e: float = 0.05
    """exploration epsilon at the end of the schedule"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which epsilon decays linearly from start_e to end_e"""
    n_step: int = 1
    """n-step returns (cut at episode ends; truncation bootstraps from the final observation)"""
    double_q: bool = False
    """Double DQN: the online network picks the next action, the target network values it"""
    dueling: bool = False
    """dueling heads: Q = V + A - mean(A)"""
    prioritized: bool = False
    """prioritized replay, proportional to |TD error|^prio_alpha"""
    prio_alpha: float = 0.6
    """priority exponent"""
    prio_beta: float = 0.4
    """importance-sampling exponent at the start, annealed linearly to 1"""
    loss: str = "mse"
    """huber | mse: TD loss"""
    max_grad_norm: float = 10.0
    """gradient norm clipping"""


def validate(dqn: DQNConfig, where: str = "dqn") -> None:
    """Ranges and replay sizes of a DQN config; raise ConfigError with one line."""
    positive = (
        "total_timesteps",
        "num_envs",
        "num_steps",
        "buffer_size",
        "train_frequency",
        "gradient_steps",
        "batch_size",
        "target_network_frequency",
        "n_step",
    )
    check_counts(dqn, positive, where)
    check_counts(dqn, ("learning_starts",), where, low=0)
    if dqn.num_steps % dqn.train_frequency:
        raise ConfigError(
            f"{where}.num_steps = {dqn.num_steps} is not a multiple of "
            f"train_frequency = {dqn.train_frequency}"
        )
    if dqn.buffer_size < dqn.num_envs * dqn.n_step:
        need = dqn.num_envs * dqn.n_step
        raise ConfigError(
            f"{where}.buffer_size = {dqn.buffer_size} must hold n_step = {dqn.n_step} "
            f"steps of num_envs = {dqn.num_envs} envs (>= {need})"
        )
    if dqn.learning_starts >= dqn.total_timesteps:
        raise ConfigError(
            f"{where}.learning_starts = {dqn.learning_starts} >= total_timesteps = "
            f"{dqn.total_timesteps}: no update would ever run"
        )
    for key in ("gamma", "start_e", "end_e", "exploration_fraction", "prio_beta"):
        if not 0.0 <= getattr(dqn, key) <= 1.0:
            raise ConfigError(f"{where}.{key} must be in [0, 1], got {getattr(dqn, key)}")
    if not 0.0 < dqn.tau <= 1.0:
        raise ConfigError(f"{where}.tau must be in (0, 1], got {dqn.tau}")
    for key in ("learning_rate", "max_grad_norm"):
        if getattr(dqn, key) <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {getattr(dqn, key)}")
    if dqn.learning_rate > 10:  # Adam's first step would overflow float32 long before 1e38
        raise ConfigError(f"{where}.learning_rate must be in (0, 10], got {dqn.learning_rate}")
    if dqn.prio_alpha < 0:
        raise ConfigError(f"{where}.prio_alpha must be >= 0, got {dqn.prio_alpha}")
    check_optimizer(dqn.optimizer, where)

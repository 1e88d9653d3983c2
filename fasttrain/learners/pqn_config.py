"""PQN's settings, torch-free: the ``[pqn]`` config dataclass (a docstring per field: the
defaults, the CLI help and the docs), its checks, and what the registry declares for PQN. The
trainer is ``fasttrain.learners.pqn``; a config is checked without importing it."""

from __future__ import annotations

from dataclasses import dataclass

from fasttrain.config.choices import check_counts, check_optimizer
from fasttrain.errors import ConfigError

# run.compile = "auto" leaves PQN eager: compiling measured slower on Breakout and Snake
AUTO_COMPILE = False
# the settings a population's members may differ in (learners/population.py): the returns
# kernel reads a discount and a trace decay per column
POPULATION_VARIABLE = (
    *("learning_rate", "max_grad_norm", "gamma", "q_lambda"),
    *("start_e", "end_e", "exploration_fraction"),
)
SHORT_NAMES = {"losses/td_loss": "td", "losses/q_values": "q", "charts/epsilon": "eps"}


@dataclass(frozen=True)
class PQNConfig:
    total_timesteps: int = 5_000_000
    """environment steps to train for (--steps); agent steps in games with several agents"""
    num_envs: int = 128
    """parallel environments"""
    num_steps: int = 32
    """steps per environment per rollout"""
    learning_rate: float = 5e-4
    """learning rate of the optimizer"""
    optimizer: str = "adam"
    """adam | muon: muon steps the hidden weight matrices with torch.optim.Muon (torch >= 2.9)
    and the rest with Adam"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.99
    """discount factor"""
    q_lambda: float = 0.65
    """Q(lambda) trace decay (0: one-step Q-learning targets, 1: Monte-Carlo returns)"""
    num_minibatches: int = 32
    """minibatches per epoch (batch = num_envs * num_steps must divide evenly)"""
    update_epochs: int = 2
    """passes over each rollout"""
    start_e: float = 1.0
    """exploration epsilon at the start"""
    end_e: float = 0.05
    """exploration epsilon at the end of the schedule"""
    exploration_fraction: float = 0.1
    """fraction of the iterations over which epsilon decays linearly from start_e to end_e"""
    layer_norm: bool = True
    """LayerNorm after each hidden layer of the Q-network (the paper's stabiliser in place of a
    target network)"""
    max_grad_norm: float = 10.0
    """gradient norm clipping"""


def validate(pqn: PQNConfig, where: str = "pqn") -> None:
    """Ranges and sizes of a PQN config; raise ConfigError with one line."""
    counts = ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    check_counts(pqn, counts, where)
    batch = pqn.num_envs * pqn.num_steps
    if batch % pqn.num_minibatches:
        raise ConfigError(
            f"{where}: batch num_envs*num_steps = {batch} does not split into "
            f"{where}.num_minibatches = {pqn.num_minibatches} equal minibatches"
        )
    for key in ("gamma", "q_lambda", "start_e", "end_e", "exploration_fraction"):
        if not 0.0 <= getattr(pqn, key) <= 1.0:
            raise ConfigError(f"{where}.{key} must be in [0, 1], got {getattr(pqn, key)}")
    for key in ("learning_rate", "max_grad_norm"):
        if getattr(pqn, key) <= 0:
            raise ConfigError(f"{where}.{key} must be > 0, got {getattr(pqn, key)}")
    if pqn.learning_rate > 10:  # Adam's first step would overflow float32 long before 1e38
        raise ConfigError(f"{where}.learning_rate must be in (0, 10], got {pqn.learning_rate}")
    check_optimizer(pqn.optimizer, where)


def population_problem(config) -> str | None:
    """None: every PQN config trains as a population (a recurrent core is PPO's alone, which
    the config refuses)."""
    return None

"""The learner registry: the one place that lists learners.

Config sections, CLI choices, the runner, checkpoint loading (``play``) and ``fasttrain bench``
read ``LEARNERS``. Adding a learner is one file (its config dataclass and validation at the top,
then its trainer read top to bottom) plus one ``register`` line below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fasttrain.learners import dqn, ppo, ppo_overlap, pqn  # noqa: F401 (ppo_overlap: see ppo.Trainer)
from fasttrain.learners.optim import OPTIMIZERS


@dataclass(frozen=True)
class Learner:
    """What the rest of fasttrain needs to know about one learner."""

    name: str
    """the ``run.algo`` value, the ``[name]`` config section and the ``--algo`` choice"""
    config: type
    """frozen dataclass of the ``[name]`` section; its field docstrings are the docs. It must
    have ``total_timesteps`` and ``num_envs`` (set by ``--steps`` and ``--num-envs``)"""
    validate: Callable
    """``validate(section, where)``: raise ``ConfigError`` with one line on bad values"""
    trainer: type
    """``trainer(config, warn=print)``: a ``learners.base.TrainerBase`` with ``iterate()``"""
    actor: Callable
    """``actor(config, obs_shape, obs_dtype, num_actions, model_state, obs_categories=0,
    greedy=True, seed=0) -> act(obs) -> actions``: the agent of a checkpoint (its most likely
    action, or a seeded sample where the learner has a policy), for ``play`` and ``eval``"""
    check_model: Callable | None = None
    """``check_model(section, model, where)``: raise ``ConfigError`` with one line where the
    ``[model]`` (a recurrent core) does not fit the section; ``None``: feed-forward models only"""
    ceiling: Callable | None = None
    """``ceiling(trainer) -> samples/s`` of the update alone, for ``fasttrain bench``"""
    bench: dict = field(default_factory=dict)
    """``[name]`` settings for bench's training rows (e.g. learn from the first iteration)"""
    smoke: dict = field(default_factory=dict)
    """``[name]`` settings of a seconds-long run on a small board (learner contract tests)"""
    choices: dict = field(default_factory=dict)
    """``{key: (valid, values)}`` of the ``[name]`` settings that take one of a few strings;
    the config refuses any other value in one line naming these"""
    short_names: dict = field(default_factory=dict)
    """``{"losses/...": "pg"}``: the console line's short name of each metrics column the
    learner adds (any other prints its last path component)"""
    networks: tuple = ("model",)
    """keys of the trainer's ``state_dict`` that hold networks (name -> tensor dicts): every one
    is checked finite before a checkpoint is written; ``model`` is the one that plays"""
    auto_compile: bool = False
    """``run.compile = "auto"`` may compile this learner (where torch.compile was measured to
    pay: long feed-forward runs of modest width on a CPU, see ``fasttrain.device``)"""


LEARNERS: dict[str, Learner] = {}


def register(learner: Learner, overwrite: bool = False) -> Learner:
    """Add ``learner`` so config, CLI, runner, checkpoints and bench know it."""
    if not isinstance(learner, Learner):
        raise TypeError(f"register() takes a Learner, got {type(learner).__name__}")
    if learner.name in LEARNERS and not overwrite:
        raise ValueError(f"a learner named {learner.name!r} is already registered")
    LEARNERS[learner.name] = learner
    return learner


def get(name: str) -> Learner:
    """The learner ``name``; unknown names raise ``ValueError`` listing the valid ones."""
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; valid: {', '.join(LEARNERS)}")
    return LEARNERS[name]


register(
    Learner(
        "ppo",
        ppo.PPOConfig,
        ppo.validate,
        ppo.Trainer,
        ppo.actor,
        check_model=ppo.check_model,
        ceiling=ppo.ceiling,
        smoke={"num_envs": 16, "num_steps": 8, "num_minibatches": 2, "anneal_lr": False},
        choices={"optimizer": OPTIMIZERS},
        short_names=ppo.SHORT_NAMES,
        auto_compile=ppo.AUTO_COMPILE,
    )
)
register(
    Learner(
        "dqn",
        dqn.DQNConfig,
        dqn.validate,
        dqn.Trainer,
        dqn.actor,
        ceiling=dqn.ceiling,
        bench={"learning_starts": 0},  # the timed iterations include updates
        choices={"loss": dqn.LOSSES, "optimizer": OPTIMIZERS},
        short_names=dqn.SHORT_NAMES,
        auto_compile=dqn.AUTO_COMPILE,
        networks=("model", "target_model"),
        smoke={
            "num_envs": 8,
            "num_steps": 8,
            "buffer_size": 2048,
            "learning_starts": 128,
            "batch_size": 32,
            "target_network_frequency": 256,
            "start_e": 0.2,  # a constant epsilon: the schedule would stretch with total_timesteps
            "end_e": 0.2,
        },
    )
)
register(
    Learner(
        "pqn",
        pqn.PQNConfig,
        pqn.validate,
        pqn.Trainer,
        pqn.actor,
        ceiling=pqn.ceiling,
        choices={"optimizer": OPTIMIZERS},
        short_names=pqn.SHORT_NAMES,
        auto_compile=pqn.AUTO_COMPILE,
        # a constant epsilon and learning rate: the schedules would stretch with total_timesteps
        smoke={
            "num_envs": 16,
            "num_steps": 8,
            "num_minibatches": 2,
            "anneal_lr": False,
            "start_e": 0.2,
            "end_e": 0.2,
        },
    )
)

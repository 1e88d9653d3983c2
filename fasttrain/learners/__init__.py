"""The learner registry: the one place that lists learners, and what each supports.

Config sections, CLI choices and help, the runner, populations (which learners train them and
which settings members may vary), checkpoint loading (``play``) and ``fasttrain bench`` read
``LEARNERS``. Adding a learner is two files (``<name>_config.py``: its config dataclass and
validation, torch-free; ``<name>.py``: its trainer, a ``learners.base.TrainerBase`` that supplies
its steps) plus one ``register`` line below. The registry imports only the config files: the
trainer side (``trainer``, ``actor``, ``ceiling``, ``choose``) may be named as
``"module:attribute"`` and is imported on first use, so the config is checked, and a bad command
refused, without importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from fasttrain.config.choices import OPTIMIZERS
from fasttrain.learners import dqn_config, ppo_config, pqn_config

# the fields that may name their object as "module:attribute", imported on first use
LAZY_FIELDS = ("trainer", "actor", "ceiling", "choose")
# a learner's trainer made a population's (the width of M members), imported on first use
POPULATION = "fasttrain.learners.population:members_of"
MAX_MEMBERS = 256  # members one process trains side by side


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
    trainer: type | str
    """``trainer(config, warn=print, members=None)``: a ``learners.base.TrainerBase``"""
    actor: Callable | str
    """``actor(config, obs_shape, obs_dtype, num_actions, model_state, obs_categories=0,
    greedy=True, seed=0) -> act(obs) -> actions``: the agent of a checkpoint (its most likely
    action, or a seeded sample where the learner has a policy), for ``play`` and ``eval``"""
    check_model: Callable | None = None
    """``check_model(section, model, where)``: raise ``ConfigError`` with one line where the
    ``[model]`` (a recurrent core) does not fit the section; ``None``: feed-forward models only"""
    ceiling: Callable | str | None = None
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
    fixed: tuple = ("optimizer",)
    """``[name]`` settings a resumed run cannot change: the checkpoint's optimizer state,
    networks or buffers are built for them (``--resume`` refuses a change in one line); every
    other setting takes effect from the resumed iteration on"""
    auto_compile: bool = False
    """``run.compile = "auto"`` may compile this learner (where torch.compile was measured to
    pay: long feed-forward runs of modest width on a CPU, see ``fasttrain.device``)"""
    choose: Callable | str | None = None
    """``choose(config) -> trainer class | None``: the variant of ``trainer`` a setting picks
    (PPO's ``ppo.overlap``), None for ``trainer`` itself"""
    population: Callable | None = None
    """``population(config) -> str | None``: this learner trains populations (``fasttrain run
    --seeds``), None where ``config`` can, else why not in one line; None: it does not"""
    variable: tuple = ()
    """``[name]`` settings a population's members may differ in (``--vary``): scalars that
    change no buffer, network or kernel"""
    graphs: bool = False
    """its rollout and update run as CUDA graphs on cuda (``run.cuda_graph``)"""
    recurrent: bool = False
    """it takes a recurrent ``[model] core`` (``check_model`` says where it fits)"""

    def __getattribute__(self, name: str):
        value = object.__getattribute__(self, name)
        if name in LAZY_FIELDS and isinstance(value, str):  # "module:attribute", imported now
            module, _, attribute = value.partition(":")
            value = getattr(importlib.import_module(module), attribute)
        return value


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


def make_trainer(config, warn=print, members=None):
    """The trainer of ``config``'s learner (its variant, where ``choose`` picks one); with
    ``members`` (their configs), a population of them (``learners/population.py``)."""
    learner = LEARNERS[config.run.algo]
    variant = learner.choose(config) if learner.choose is not None else None
    trainer = variant or learner.trainer
    if members is not None:  # the registry's lazy form: the population side imports it
        module, _, name = POPULATION.partition(":")
        trainer = getattr(importlib.import_module(module), name)(trainer)
    return trainer(config, warn=warn, members=members)


def variable_settings() -> str:
    """The settings members of a population may vary, by learner (``--vary``'s help)."""
    return "; ".join(
        f"{name}: {', '.join(one.variable)}" for name, one in LEARNERS.items() if one.variable
    )


register(
    Learner(
        "ppo",
        ppo_config.PPOConfig,
        ppo_config.validate,
        "fasttrain.learners.ppo:Trainer",
        "fasttrain.learners.ppo:actor",
        check_model=ppo_config.check_model,
        choose="fasttrain.learners.ppo_overlap:choose",
        population=ppo_config.population_problem,
        variable=ppo_config.POPULATION_VARIABLE,
        graphs=True,
        recurrent=True,
        ceiling="fasttrain.learners.base:update_rate",
        smoke={"num_envs": 16, "num_steps": 8, "num_minibatches": 2, "anneal_lr": False},
        choices={"optimizer": OPTIMIZERS},
        short_names=ppo_config.SHORT_NAMES,
        fixed=("optimizer", "overlap"),
        auto_compile=ppo_config.AUTO_COMPILE,
    )
)
register(
    Learner(
        "dqn",
        dqn_config.DQNConfig,
        dqn_config.validate,
        "fasttrain.learners.dqn:Trainer",
        "fasttrain.learners.dqn:actor",
        ceiling="fasttrain.learners.dqn:ceiling",
        bench={"learning_starts": 0},  # the timed iterations include updates
        choices={"loss": dqn_config.LOSSES, "optimizer": OPTIMIZERS},
        short_names=dqn_config.SHORT_NAMES,
        fixed=("optimizer", "buffer_size", "prioritized", "dueling"),
        auto_compile=dqn_config.AUTO_COMPILE,
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
        pqn_config.PQNConfig,
        pqn_config.validate,
        "fasttrain.learners.pqn:Trainer",
        "fasttrain.learners.pqn:actor",
        ceiling="fasttrain.learners.base:update_rate",
        population=pqn_config.population_problem,
        variable=pqn_config.POPULATION_VARIABLE,
        graphs=True,
        choices={"optimizer": OPTIMIZERS},
        short_names=pqn_config.SHORT_NAMES,
        fixed=("optimizer", "layer_norm"),
        auto_compile=pqn_config.AUTO_COMPILE,
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

"""The config's sections: a frozen dataclass per section whose defaults equal ``config.toml``
(``[run]``, ``[game]``, ``[model]``, ``[log]`` here; one per learner, see
``fasttrain.learners``), and the values a key may take. Every field's docstring is its
documentation, its comment in config.toml and its ``--set`` help. Torch-free: a layer is checked
against these without importing torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fasttrain.config.choices import (
    ACTIVATIONS,
    AMP_MODES,
    COMPILE_MODES,
    CORES,
    DEVICES,
    DIST_BACKENDS,
    MODEL_KINDS,
    PRESET_VARIANTS,
    WANDB_MODES,
)
from fasttrain.learners import LEARNERS


@dataclass(frozen=True)
class RunConfig:
    algo: str = "ppo"
    """ppo | dqn | pqn: learning algorithm (see fasttrain.learners.LEARNERS); where no layer
    sets it, the game's preset names it: pqn for minatar-asterix and minatar-seaquest, ppo for
    the others"""
    seed: int = 0
    """seed of the environments, the network and the sampling"""
    device: str = "auto"
    """auto | cpu | cuda: where environments and learner run (auto: cuda when present)"""
    preset: str = "auto"
    """auto | base | fp32 | cuda: which variant of the game's tuned preset applies: base (tuned
    where matrix units compute bf16 natively: AMX, AVX-512 BF16), fp32 (a CPU without them:
    AVX2, AVX-512 without BF16, NEON) or cuda (a GPU), each laid over base where the game has
    one; auto: by the device and the CPU's class, and the run's config.toml records the
    choice"""
    amp: str = "auto"
    """auto | off | bf16 | fp16: mixed precision of the networks (auto: bf16 where the CPU or GPU
    computes it natively, on a CPU for networks 128 or more wide; off elsewhere; fp16 uses a
    GradScaler, CUDA only)"""
    compile: str = "auto"
    """auto | off | default | reduce-overhead | max-autotune: torch.compile the rollout forward
    pass and the whole update step (loss, backward, optimizer); auto: default for feed-forward
    PPO runs of 2M steps or more with networks at most 256 wide, on a CPU with a C++ compiler;
    off elsewhere; where compiling fails it warns once and runs eagerly"""
    cuda_graph: bool = True
    """on cuda, capture the rollout horizon (every step's policy forward, sampling, env kernel
    and storage writes) and each minibatch step of the update (PPO, PQN) once as CUDA graphs
    and replay them, the same results bit for bit with no per-step launch cost; false: launch
    each step's work eagerly (where capture is not possible the run says why in one line)"""
    torch_threads: int = 0
    """torch intra-op threads (0: one per core; one for a small network stepping few rows, under
    500k multiply-adds per rollout step, as CartPole's defaults)"""
    numba_threads: int = 0
    """Numba threads for the environments (0: one per core; one where torch_threads's 0 means
    one)"""
    checkpoint_interval: int = 100
    """write checkpoint.pt every this many iterations (and always at the end, on Ctrl-C and on
    SIGTERM)"""
    nan_patience: int = 20
    """stop after this many optimizer updates in a row were skipped for a non-finite loss or
    gradient (the last good checkpoint is kept)"""
    dist_backend: str = "auto"
    """auto | gloo | nccl: torch.distributed backend of a data-parallel run under torchrun
    (auto: nccl on cuda, gloo on the CPU)"""
    dist_timeout_s: float = 120.0
    """a data-parallel run's collectives fail after this many seconds without every rank,
    instead of hanging"""
    action_repeat: int = 1
    """play each action this many game steps inside one step launch, summing the rewards and
    stopping at the episode's end (Atari's frame skip; single-agent games); steps, SPS and
    total_timesteps count learner steps, each up to this many game steps"""


@dataclass(frozen=True)
class GameConfig:
    name: str = "snake"
    """game to train on (see `fasttrain games`)"""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "auto"
    """auto | mlp | cnn (auto: cnn for (C, H, W) observations on cuda, mlp otherwise)"""
    hidden: int = 128
    """width of the hidden layer(s)"""
    layers: int = 2
    """hidden layers of the mlp; 3x3 convolutions of the cnn"""
    channels: int = 16
    """channels of each cnn convolution"""
    activation: str = "tanh"
    """tanh | relu: mlp activation"""
    core: str = "none"
    """none | lstm | gru: a recurrent core between the torso and the heads (PPO only; sequences
    of ppo.bptt_horizon steps in the update)"""
    core_size: int = 128
    """width of the recurrent core's state (h; an LSTM also keeps c of this width)"""


@dataclass(frozen=True)
class LogConfig:
    interval_s: float = 5.0
    """seconds between log lines on the terminal"""
    csv_every: int = 1
    """write a metrics.csv row every this many iterations (rows do not depend on timing)"""
    progress: bool = True
    """show a progress bar when stdout is a terminal"""
    tensorboard: bool = False
    """also write the metrics.csv rows as TensorBoard scalars in RUN_DIR/tensorboard (extra
    tensorboard)"""
    wandb: str = "off"
    """off | offline | online: also log the metrics.csv rows to Weights & Biases (extra wandb;
    offline writes RUN_DIR/wandb for `wandb sync`)"""
    wandb_project: str = "fasttrain"
    """W&B project"""
    wandb_name: str = ""
    """W&B run name ("": the run directory's name)"""
    curves: bool = True
    """write RUN_DIR/curves.png (return and score over steps) at the end, when matplotlib is
    installed (extra plot)"""
    replay: bool = False
    """write RUN_DIR/replay.gif of the final policy playing one environment at the end (extra
    media)"""
    replay_steps: int = 300
    """steps in replay.gif"""
    wide: bool = False
    """print every loss and where the time went on each log line (fasttrain run --verbose),
    not the line that fits 120 columns"""


FIXED_SECTIONS = {"run": RunConfig, "game": GameConfig, "model": ModelConfig, "log": LogConfig}


class _Sections(Mapping):
    """Section name -> dataclass, in file order; learner sections follow ``LEARNERS`` live."""

    def _all(self) -> dict:
        learners = {name: learner.config for name, learner in LEARNERS.items()}
        return {
            "run": RunConfig,
            "game": GameConfig,
            **learners,
            "model": ModelConfig,
            "log": LogConfig,
        }

    def __getitem__(self, name):
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


SECTIONS = _Sections()
LEARNER_SECTIONS = LEARNERS.keys()  # may be overridden per game in [game.<name>.<learner>]
CHOICES = {
    ("run", "device"): DEVICES,
    ("run", "preset"): PRESET_VARIANTS,
    ("run", "amp"): AMP_MODES,
    ("run", "compile"): COMPILE_MODES,
    ("run", "dist_backend"): DIST_BACKENDS,
    ("model", "kind"): MODEL_KINDS,
    ("model", "activation"): ACTIVATIONS,
    ("model", "core"): CORES,
    ("log", "wandb"): WANDB_MODES,
}


def choices(section: str, key: str):
    """The valid values of ``section.key``, or None when any value of its type goes: a
    learner's sections take the choices its registration declares."""
    if (section, key) == ("run", "algo"):
        return tuple(LEARNERS)
    if section in LEARNERS:
        return LEARNERS[section].choices.get(key)
    return CHOICES.get((section, key))

"""The settings that take one of a few strings, and the ranges of the counts, torch-free: the
config checks a value against these without importing torch, the learners or the models (a
refused command answers at once). The modules that act on a setting import its choices from
here."""

from __future__ import annotations

from fasttrain.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
# run.preset: which of a game's tuned presets applies (fasttrain.config.presets)
PRESET_VARIANTS = ("auto", "base", "fp32", "cuda")
AMP_MODES = ("auto", "off", "bf16", "fp16")
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")
DIST_BACKENDS = ("auto", "gloo", "nccl")  # torch.distributed's
MODEL_KINDS = ("auto", "mlp", "cnn")
CORES = ("none", "lstm", "gru")
ACTIVATIONS = ("tanh", "relu")
OPTIMIZERS = ("adam", "muon")


def check_optimizer(name: str, where: str) -> None:
    """One line for an optimizer that is not one of ``OPTIMIZERS``, or that this torch lacks
    (Muon came with torch 2.9; torch is imported only to answer that)."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown {where}.optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    if name == "muon":
        import torch

        if not hasattr(torch.optim, "Muon"):
            raise ConfigError(
                f"{where}.optimizer = 'muon' needs torch >= 2.9 (this is {torch.__version__}); "
                "use 'adam' or upgrade torch"
            )


# log.wandb: where the W&B dashboard writes (fasttrain.run.dashboards)
WANDB_MODES = ("off", "offline", "online")


# The most each count may be, in every section that has it: a loop runs over it (epochs,
# minibatches, steps, gradient steps, repeats, layers) or it sizes a buffer. Far above any run
# (the presets' largest: 50M steps, 1,024 envs, 128 steps, 32 minibatches, 4 epochs, a 100k
# buffer; fasttrain bench steps up to 2**22 envs), yet low enough that a typo such as 2**70 is
# refused in one line wherever a config is built (--set, a file, a checkpoint's saved config)
# instead of starting a first iteration that never ends.
MOST = {
    "total_timesteps": 10**15,  # a year at 30M steps/s
    "num_envs": 2**24,
    "num_steps": 2**16,
    "num_minibatches": 2**16,
    "update_epochs": 1000,
    "bptt_horizon": 2**16,
    "buffer_size": 2**32,
    "learning_starts": 10**15,
    "train_frequency": 2**16,
    "gradient_steps": 1000,
    "batch_size": 2**24,
    "target_network_frequency": 10**15,
    "n_step": 1000,
    "action_repeat": 1000,
    "torch_threads": 4096,  # torch takes up to a C int's, and starts them all at once
    "layers": 1000,
}


def check_counts(section, keys, where: str, low: int = 1) -> None:
    """One line for the first of ``keys`` (fields of the dataclass ``section``, written
    ``where.key``) outside ``low`` to its ``MOST``."""
    for key in keys:
        value = getattr(section, key)
        if value < low:
            raise ConfigError(f"{where}.{key} must be >= {low}, got {value}")
        if value > MOST[key]:
            most = f"{MOST[key]:_}" if MOST[key] >= 10**5 else MOST[key]  # as TOML may write it
            raise ConfigError(f"{where}.{key} must be in [{low}, {most}], got {value}")

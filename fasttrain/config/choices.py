"""The settings that take one of a few strings, torch-free: the config checks a value against
these without importing torch, the learners or the models (a refused command answers at once).
The modules that act on a setting import its choices from here."""

from __future__ import annotations

from fasttrain.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
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

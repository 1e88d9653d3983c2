"""Values a checkpoint holds, checked before anything uses them: one function per kind.

A checkpoint's SHA-256 says the file is intact, not that it is sane: anyone can write a valid
digest around any state. So every learner field a reader takes from a file goes through here
first, and a missing or ill-typed one is refused with one line (``RunError``) naming the field,
the value and what was expected, before the run, the trainer or the agent changes. The game's
own state (``env``) is checked where it is declared (``fasttrain.kernels.env``).

``check_common`` holds what every reader may look at (counters, clock, identity, curriculum,
episode means); the trainers check their own fields against their live buffers, networks and
optimizer with ``count``, ``like``, ``weights``, ``generator_state`` and ``optimizer_state``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fasttrain.errors import RunError

INT64_MAX = 2**63 - 1  # counters are int64 wherever they meet torch or NumPy
# The largest weight magnitude a network may hold, read from a checkpoint or saved into one.
# Adam moves a weight by about the learning rate per update (2e-2 at most in the presets), so
# training leaves weights within a few units; weights past 1e6 are a diverged run or a file
# made by hand, and three layers of them already reach 1e18 per unit of input (times the
# widths), on the way to float32's inf, whose logits sampling cannot take. What overflows below
# the bound is refused by the actor in one line (``PolicyActor``).
MAX_WEIGHT = 1e6
SHOWN = 60  # characters of a value a refusal quotes


def show(value) -> str:
    """A value as a refusal quotes it: short, one line, arrays by their shape and dtype."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"a {dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    if hasattr(value, "kind") and hasattr(value, "shape"):  # statefile.ArrayInfo
        return f"a {value.dtype} {value.kind} array of shape {tuple(value.shape)}"
    if isinstance(value, dict):
        return f"a table of {len(value)} {'entry' if len(value) == 1 else 'entries'}"
    if isinstance(value, (list, tuple)) and len(repr(value)) > SHOWN:
        return f"a list of {len(value)} entries"
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def refuse(name: str, value, expected: str) -> RunError:
    """The one line for field ``name`` holding ``value`` where ``expected`` was due."""
    return RunError(f"checkpoint {name} = {show(value)}; expected {expected}")


def missing(name: str, expected: str) -> RunError:
    return RunError(f"checkpoint has no {name}; expected {expected}")


def field(state: dict, key: str, expected: str, name: str | None = None):
    """``state[key]``, or the one line saying the checkpoint lacks it."""
    if not isinstance(state, dict) or key not in state:
        raise missing(name or key, expected)
    return state[key]


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ------------------------------------------------------------------------------- scalars


def count(value, name: str, least: int = 0, most: int = INT64_MAX) -> int:
    """A whole number in ``[least, most]`` (never a bool, a float or a string)."""
    if not is_int(value) or not least <= value <= most:
        top = "2**63 - 1" if most == INT64_MAX else f"{most:,}"
        raise refuse(name, value, f"a whole number in [{least:,}, {top}]")
    return value


def seconds(value, name: str) -> float:
    """A finite, non-negative number of seconds."""
    if not is_number(value) or not math.isfinite(value) or value < 0:
        raise refuse(name, value, "a finite number of seconds >= 0")
    return float(value)


def table(value, name: str) -> dict:
    if not isinstance(value, dict):
        raise refuse(name, value, "a table")
    return value


def text(value, name: str) -> str:
    if not isinstance(value, str):
        raise refuse(name, value, "a string")
    return value


def progress(state: dict, required: bool) -> None:
    """``global_step`` and ``iteration``: whole numbers, one step at least per iteration."""
    if not required and "global_step" not in state and "iteration" not in state:
        return
    expected = "a whole number in [0, 2**63 - 1]"
    step = count(field(state, "global_step", expected), "global_step")
    iteration = count(field(state, "iteration", expected), "iteration")
    if iteration > step:  # every iteration steps every row at least once
        raise refuse(
            "iteration", iteration, f"at most global_step ({step:,}): each iteration takes steps"
        )


# ------------------------------------------------------------------------------- common


def settings(value) -> bool:
    """A table of settings: names to numbers, strings, bools or none (a config section)."""
    scalars = (str, int, float, bool, type(None))
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, scalars) for k, v in value.items()
    )


IDENTITY = {  # field: (check, what it must be)
    "game": (lambda v: isinstance(v, str), "a string"),
    "learner": (lambda v: isinstance(v, str), "a string"),
    "game_params": (settings, "a table of settings (numbers, strings, bools)"),
    "model": (settings, "a table of settings (numbers, strings, bools)"),
    "num_envs": (lambda v: is_int(v) and 1 <= v <= INT64_MAX, "a whole number >= 1"),
    "obs_shape": (
        lambda v: isinstance(v, (list, tuple)) and len(v) <= 8 and all(is_int(n) for n in v),
        "a list of whole numbers",
    ),
    "world_size": (lambda v: is_int(v) and 1 <= v <= 2**31, "a whole number >= 1"),
}


def identity(value) -> None:
    """The fields of a checkpoint's ``identity`` that are there have their types."""
    table(value, "identity")
    for key, (ok, expected) in IDENTITY.items():
        if key in value and not ok(value[key]):
            raise refuse(f"identity.{key}", value[key], expected)


def curriculum(value) -> None:
    """A curriculum's saved stage, its start and its recent episode batches."""
    table(value, "curriculum")
    count(field(value, "stage", "a stage number", "curriculum.stage"), "curriculum.stage")
    start = field(value, "stage_start", "a step", "curriculum.stage_start")
    count(start, "curriculum.stage_start")
    batches = field(value, "batches", "a list", "curriculum.batches")
    pair = "[mean, episodes] pairs of a finite number and a whole number"
    if not isinstance(batches, (list, tuple)):
        raise refuse("curriculum.batches", batches, f"a list of {pair}")
    for k, batch in enumerate(batches):
        if (
            not isinstance(batch, (list, tuple))
            or len(batch) != 2
            or not is_number(batch[0])
            or not math.isfinite(batch[0])
            or not is_int(batch[1])
            or not 0 <= batch[1] <= INT64_MAX
        ):
            raise refuse(f"curriculum.batches[{k}]", batch, pair)


def episode_means(state: dict) -> None:
    """``episode`` (the means the last row showed) and ``episode_batches`` (stats read since)."""
    keys = ("return", "length", "score")
    if "episode" in state:
        means = table(state["episode"], "episode")
        for key in keys:
            value = field(means, key, "a number (nan before any episode)", f"episode.{key}")
            if not is_number(value) or math.isinf(value):
                raise refuse(f"episode.{key}", value, "a finite number or nan")
    batches = state.get("episode_batches", [])
    if not isinstance(batches, list):
        raise refuse("episode_batches", batches, "a list of tables")
    for k, batch in enumerate(batches):
        table(batch, f"episode_batches[{k}]")
        for key in keys:
            value = field(batch, key, "a finite number", f"episode_batches[{k}].{key}")
            if not is_number(value) or not math.isfinite(value):
                raise refuse(f"episode_batches[{k}].{key}", value, "a finite number")
        episodes = field(batch, "episodes", "a count", f"episode_batches[{k}].episodes")
        count(episodes, f"episode_batches[{k}].episodes", least=1)


def check_common(state: dict, resuming: bool = False) -> None:
    """The fields any reader may look at: learner, device, counters, clock, identity, config,
    curriculum and episode means. ``resuming`` requires the counters every trainer writes."""
    for key in ("learner", "device", "config"):
        if key in state:
            text(state[key], key)
    progress(state, required=resuming)
    if "time_s" in state:
        seconds(state["time_s"], "time_s")
    if "identity" in state:
        identity(state["identity"])
    if state.get("curriculum") is not None:
        curriculum(state["curriculum"])
    episode_means(state)
    ranks = state.get("rank_states", [])  # the other ranks' states (torchrun), each a trainer's
    if not isinstance(ranks, list):
        raise refuse("rank_states", ranks, "a list of the other ranks' states")
    for k, rank in enumerate(ranks):
        table(rank, f"rank_states[{k}]")
        progress(rank, required=resuming)


# ------------------------------------------------------------------------------- arrays


def like(value, name: str, reference: torch.Tensor, below: int = 0) -> torch.Tensor:
    """A tensor of ``reference``'s shape and dtype (what a buffer ``copy_``s it into), finite;
    with ``below``, whole numbers in ``[0, below)`` (actions, categorical observations: what
    the networks index with)."""
    if (
        not isinstance(value, torch.Tensor)
        or tuple(value.shape) != tuple(reference.shape)
        or value.dtype != reference.dtype
    ):
        dtype = str(reference.dtype).removeprefix("torch.")
        raise refuse(name, value, f"a {dtype} tensor of shape {tuple(reference.shape)}")
    if value.is_floating_point() and not torch.isfinite(value).all():
        raise refuse(name, value, "finite values")
    if value.dtype == torch.bool and value.numel() and bool((value.view(torch.uint8) > 1).any()):
        raise refuse(name, value, "true or false (bytes 0 and 1)")  # a crafted byte: 2..255
    if below and value.numel() and not bool(((value >= 0) & (value < below)).all()):
        raise refuse(name, value, f"values in [0, {below})")
    return value


OVERSIZED = f"beyond +-{MAX_WEIGHT:g}"


def bad_weight(tensor: torch.Tensor) -> str | None:
    """``"not finite"`` or ``OVERSIZED`` for a floating-point tensor holding such a value,
    None for a sane one (and for any other tensor)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    if not bool(torch.isfinite(tensor).all()):
        return "not finite"
    return OVERSIZED if float(tensor.abs().max()) > MAX_WEIGHT else None


def weights(value, name: str, module: torch.nn.Module) -> None:
    """A network's saved weights: exactly ``module``'s names, each of its shape and dtype,
    finite and within ``MAX_WEIGHT``."""
    own = module.state_dict()
    saved = table(value, name)
    for key in saved:
        if key not in own:
            raise refuse(f"{name}.{key}", saved[key], "no such weight in this run's network")
    for key, reference in own.items():
        tensor = like(
            field(saved, key, "a weight tensor", f"{name}.{key}"), f"{name}.{key}", reference
        )
        if bad_weight(tensor):
            raise refuse(f"{name}.{key}", tensor, f"finite weights within +-{MAX_WEIGHT:g}")


def generator_state(value, name: str, device: torch.device) -> torch.Tensor:
    """A torch generator's state for ``device``: taken by a scratch generator first, so a
    state torch refuses is one line and the run's own generator is never half set."""
    reference = torch.Generator(device=device).get_state()
    if (
        not isinstance(value, torch.Tensor)
        or value.dtype != torch.uint8
        or value.shape != reference.shape
    ):
        raise refuse(name, value, f"a uint8 tensor of shape {tuple(reference.shape)}")
    try:
        torch.Generator(device=device).set_state(value)
    except (RuntimeError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise refuse(name, value, f"a state torch's generator takes ({detail})") from None
    return value


# ------------------------------------------------------------------------------- optimizer


def optimizer_state(value, optimizer, name: str = "optimizer") -> None:
    """An optimizer's saved state against the live ``optimizer`` (``Optimizers`` or one torch
    optimizer): its groups, their settings' types and ranges, and a state per parameter of
    that parameter's shape, finite."""
    parts = getattr(optimizer, "optimizers", None)
    if parts is None:
        return _one_optimizer(value, optimizer, name)
    saved = field(table(value, name), "optimizers", "a list of optimizer states", name)
    if not isinstance(saved, list) or len(saved) != len(parts):
        raise refuse(f"{name}.optimizers", saved, f"a list of {len(parts)} optimizer states")
    for k, (state, part) in enumerate(zip(saved, parts, strict=True)):
        _one_optimizer(state, part, f"{name}.optimizers[{k}]")


def _one_optimizer(value, optimizer, name: str) -> None:
    table(value, name)
    live = optimizer.param_groups
    groups = field(value, "param_groups", "a list of parameter groups", f"{name}.param_groups")
    if not isinstance(groups, list) or len(groups) != len(live):
        raise refuse(f"{name}.param_groups", groups, f"a list of {len(live)} parameter groups")
    shapes = {}  # the saved index of each parameter: its live shape
    for g, (group, own) in enumerate(zip(groups, live, strict=True)):
        where = f"{name}.param_groups[{g}]"
        table(group, where)
        ids = field(group, "params", "a list of parameter indices", f"{where}.params")
        expected = f"a list of {len(own['params'])} distinct parameter indices"
        if not isinstance(ids, list) or len(ids) != len(own["params"]):
            raise refuse(f"{where}.params", ids, expected)
        for index, param in zip(ids, own["params"], strict=True):
            if not is_int(index) or index in shapes:
                raise refuse(f"{where}.params", ids, expected)
            shapes[index] = tuple(param.shape)
        for key, setting in group.items():
            if key != "params" and key in own:
                _setting(setting, own[key], f"{where}.{key}")
        for key in own.keys() - group.keys():  # a setting the file does not hold (an older
            group[key] = own[key]  # torch wrote it, or it was cut out): this run's own value
    states = field(value, "state", "a table of per-parameter states", f"{name}.state")
    for index, state in table(states, f"{name}.state").items():
        if index not in shapes:
            raise refuse(f"{name}.state", index, f"a parameter index among {sorted(shapes)}")
        for key, item in table(state, f"{name}.state[{index}]").items():
            _moment(item, shapes[index], key, f"{name}.state[{index}].{key}")


def _setting(value, own, name: str) -> None:
    """A group's setting as the live optimizer has it: a bool for a bool, the same string or
    whole number (structure, such as Muon's Newton-Schulz steps: a count from a file would
    set the work of every step), finite numbers, and rates and coefficients >= 0."""
    if isinstance(own, bool) or own is None:
        if not (value is None or isinstance(value, bool)):
            raise refuse(name, value, "true, false or none")
    elif isinstance(own, str) or is_int(own):
        if type(value) is not type(own) or value != own:
            raise refuse(name, value, f"{own!r}, as this run's optimizer has it")
    elif isinstance(own, (list, tuple)):  # Adam's betas, Muon's Newton-Schulz coefficients
        ok = isinstance(value, (list, tuple)) and len(value) == len(own)
        if not ok or not all(is_number(x) and math.isfinite(x) for x in value):
            raise refuse(name, value, f"{len(own)} finite numbers")
    else:  # a float, or a learning rate as a 0-d tensor
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
            value = float(value)
        if not is_number(value) or not math.isfinite(value) or value < 0:
            raise refuse(name, value, "a finite number >= 0")


SQUARES = ("exp_avg_sq", "max_exp_avg_sq", "square_avg")  # Adam's, AMSGrad's, RMSprop's


def _moment(value, shape: tuple, key: str, name: str) -> None:
    """One per-parameter state entry: ``step`` a finite count, any other its parameter's
    shape, floating point and finite."""
    if key == "step":
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = float(value)
        if not is_number(value) or not math.isfinite(value) or not 0 <= value <= INT64_MAX:
            raise refuse(name, value, "a finite step count >= 0")
        return
    if (
        not isinstance(value, torch.Tensor)
        or tuple(value.shape) != shape
        or not value.is_floating_point()
    ):
        raise refuse(name, value, f"a floating-point tensor of shape {shape}")
    if not torch.isfinite(value).all():
        raise refuse(name, value, "finite values")
    if key in SQUARES and bool((value < 0).any()):  # a mean of squares: its root is taken
        raise refuse(name, value, "values >= 0 (a running mean of squared gradients)")

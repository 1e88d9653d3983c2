"""The cases of the checkpoint fuzzer (``tests/fuzzing.py``): one change each to a real
checkpoint's state, seeded, field by field: every environment-state array, every learner-state
scalar and tensor, every header, identity and saved-config field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

READERS = ("inspect", "play", "eval", "resume")  # every command that reads a checkpoint
LOADERS = ("play", "eval", "resume")  # the readers that load it (inspect only describes it)
COUNTS = ("ep_length", "done_length", "done_count")  # the runtime's counters: never negative


@dataclass
class Case:
    """One change to a checkpoint's state, and the readers that must refuse it."""

    id: str  # "env.length[3]=int32 max": where, and what was written there
    kind: str  # env | learner | tensor | header
    readers: tuple = READERS  # the readers it is given to
    refuse: tuple = ()  # readers for which exit 0 is a silent acceptance (a failure)
    apply: object = field(default=None, repr=False)  # state -> None, mutating it in place


def _set(path: tuple, value):
    def apply(state):
        node = state
        for key in path[:-1]:
            node = node[key]
        if value is _MISSING:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return apply


_MISSING = object()


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def env_cases(env: dict, rng: np.random.Generator) -> list[Case]:
    """Each environment-state array: hostile values at a seeded position, random contents."""
    cases = []
    for name, array in env.items():
        for label, value, must in _hostile_elements(name, array):
            index = tuple(int(rng.integers(n)) for n in array.shape)
            cases.append(_env_case(name, array, index, label, value, must))
        random = _random_array(array, rng)
        cases.append(
            Case(f"env.{name}=random", "env", ("resume",), (), _set(("env", name), random))
        )
    return cases


def _env_case(name, array, index, label, value, must) -> Case:
    where = ",".join(str(i) for i in index)

    def apply(state):
        target = state["env"][name]
        (target.view(np.uint8) if label == "byte 7" else target)[index] = value

    refuse = ("resume",) if must else ()
    return Case(f"env.{name}[{where}]={label}", "env", ("inspect", "resume"), refuse, apply)


def _hostile_elements(name: str, array: np.ndarray) -> list:
    """(label, value, must be refused) for one element of ``array``. Must: what no game and
    no runtime buffer can hold (NaN, a bool byte of 7, a zero rng word, a negative count or
    action) and an integer type's extremes (the next step would overflow it); a byte's 255, -1
    (a sentinel in some games), 2**31-1 in 64 bits and 1e8 may be legal: refused or run."""
    kind = array.dtype.kind
    if kind == "b":
        return [("byte 7", 7, True)]
    if kind == "f":
        return [
            ("nan", np.nan, True),
            ("inf", np.inf, True),
            ("-1", -1.0, False),
            ("1e30", 1e30 if array.dtype.itemsize > 2 else 6e4, False),
        ]
    info = np.iinfo(array.dtype)
    if name == "rng":
        return [("0", 0, True), ("max", info.max, False)]
    out = [("max", info.max, kind == "i" or info.bits >= 16)]
    if kind == "i":
        out += [("min", info.min, True), ("-1", -1, name in (*COUNTS, "actions"))]
    if info.max > 2**31 - 1:
        out.append(("2**31-1", 2**31 - 1, False))
    if info.max > 10**8:
        out.append(("large", 10**8, False))
    return out


def _random_array(array: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if array.dtype.kind == "b":
        return rng.integers(0, 256, array.shape, dtype=np.uint8).view(np.bool_)
    if array.dtype.kind == "f":
        return (rng.standard_normal(array.shape) * 1e3).astype(array.dtype)
    info = np.iinfo(array.dtype)
    return rng.integers(info.min, info.max, array.shape, dtype=array.dtype, endpoint=True)


# values written in place of a learner-state scalar; the counters and clocks must refuse each
SCALARS = {
    "-1000": -1000,
    "1.5": 1.5,
    "true": True,
    "2**80": 2**80,
    "nan": math.nan,
    "inf": math.inf,
    "string": "x",
    "none": None,
    "list": [1],
    "missing": _MISSING,
}
COUNTERS = ("global_step", "iteration")  # whole, non-negative
CLOCKS = ("time_s",)  # finite, non-negative


def learner_cases(state: dict, rng: np.random.Generator, per_leaf: int) -> list[Case]:
    """Every scalar leaf of the learner's state (not env, networks, header): hostile values;
    counters and clocks get all of them, other leaves ``per_leaf`` seeded ones."""
    cases = []
    for path, value in _leaves(
        state, skip=("env", "config", "identity", "format", "learner", "device")
    ):
        if hasattr(value, "shape"):
            continue
        labels = list(SCALARS)
        top = len(path) == 1 and path[0] in (*COUNTERS, *CLOCKS)
        if not top:
            labels = [labels[i] for i in rng.choice(len(labels), per_leaf, replace=False)]
        for label in labels:
            refuse = ("resume",) if top and _bad_scalar(path[0], SCALARS[label]) else ()
            cases.append(
                Case(
                    f"{_dotted(path)}={label}",
                    "learner",
                    ("inspect", "resume"),
                    refuse,
                    _set(path, SCALARS[label]),
                )
            )
    return cases


def _bad_scalar(name: str, value) -> bool:
    if value is _MISSING:  # a counter is needed; a clock may start again at 0
        return name in COUNTERS
    if value is None or isinstance(value, (bool, str, list)):
        return True
    if name in COUNTERS:
        return not isinstance(value, int) or value < 0 or value > 2**62
    return not math.isfinite(value) or value < 0


def _leaves(node, path=(), skip=()):
    if isinstance(node, dict):
        for key, value in node.items():
            if not path and key in skip:
                continue
            yield from _leaves(value, (*path, key), skip)
    elif isinstance(node, list):  # a tuple is one leaf (optimizer betas, obs_shape)
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i), skip)
    else:
        yield path, node


TENSOR_CHANGES = ("nan", "1e30", "shape", "empty", "float64", "random")


def tensor_cases(state: dict, rng: np.random.Generator, per_tensor: int) -> list[Case]:
    """Every tensor of the learner's state (networks, optimizer, generators, buffers):
    ``per_tensor`` seeded changes each; a network's must be refused where it is loaded."""
    from fasttrain.run.checkpoint import networks

    nets = networks(state)
    cases = []
    for path, value in _leaves(state, skip=("env", "config", "identity")):
        if not hasattr(value, "shape"):
            continue
        valued = value.is_floating_point() and value.numel() > 0  # NaN and 1e30 need a value
        kinds = [c for c in TENSOR_CHANGES if valued or c not in ("nan", "1e30")]
        for change in [kinds[i] for i in sorted(rng.choice(len(kinds), per_tensor, False))]:
            readers = READERS if path[0] in nets else ("inspect", "resume")
            refuse = ()
            if path[0] in nets and change in ("nan", "shape", "empty"):
                # play and eval load the acting network alone
                refuse = ("resume", "play", "eval") if path[0] == "model" else ("resume",)
            cases.append(
                Case(
                    f"{_dotted(path)}={change}",
                    "tensor",
                    readers,
                    refuse,
                    _set(path, _changed_tensor(value, change, rng)),
                )
            )
    return cases


def _changed_tensor(tensor, change: str, rng: np.random.Generator):
    import torch

    if change == "nan":
        out = tensor.clone()
        out.view(-1)[int(rng.integers(out.numel()))] = math.nan
        return out
    if change == "1e30":
        return torch.full_like(tensor, 1e30 if tensor.dtype != torch.float16 else 6e4)
    if change == "shape":
        return torch.zeros((*tensor.shape, 2), dtype=tensor.dtype)
    if change == "empty":
        return torch.zeros((0,), dtype=tensor.dtype)
    if change == "float64":
        return tensor.to(torch.float64)
    if tensor.numel() == 0:  # nothing to randomise (and NumPy's empty strides upset views)
        return torch.empty(tuple(tensor.shape), dtype=tensor.dtype)
    if tensor.dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, tuple(tensor.shape)).astype(bool))
    if tensor.is_floating_point():
        values = rng.standard_normal(tuple(tensor.shape))
        return torch.from_numpy(values).to(tensor.dtype)
    info = torch.iinfo(tensor.dtype)
    values = rng.integers(info.min, info.max, tuple(tensor.shape), endpoint=True)
    return torch.from_numpy(values.astype(str(tensor.dtype).removeprefix("torch.")))


def header_cases(state: dict, rng: np.random.Generator, per_leaf: int) -> list[Case]:
    """The file's header fields (format, learner, device), every identity leaf and the saved
    config's sizes: wrong types, missing, absurd sizes."""
    every = ("format", "identity", "config", "learner", "device")
    cases = [
        Case(f"format={label}", "header", READERS, LOADERS, _set(("format",), value))
        # no "missing": fasttrain.run.checkpoint.save writes a format into every file
        for label, value in (("2", 2), ("'3'", "3"), ("none", None), ("[3]", [3]))
    ]
    for key in ("learner", "device", "identity", "config"):
        for label, value in (("5", 5), ("none", None), ("missing", _MISSING), ("'nope'", "nope")):
            # play and eval build the network from the config: it must be a text they parse
            refuse = ("play", "eval") if key == "config" else ()
            cases.append(Case(f"{key}={label}", "header", READERS, refuse, _set((key,), value)))
    identity = {k: v for k, v in state.items() if k == "identity"}
    for path, value in _leaves(identity):
        sizes = path[-1] in ("hidden", "obs_shape", "num_envs")
        choices = _identity_values(value)
        if not sizes:
            choices = [choices[i] for i in sorted(rng.choice(len(choices), per_leaf, False))]
        for label, new in choices:
            refuse = () if new is _MISSING else ("resume",)  # another run's identity
            cases.append(
                Case(f"{_dotted(path)}={label}", "header", READERS, refuse, _set(path, new))
            )
    cases += config_cases(state["config"], state["identity"]["game"])
    assert {c.id.split("=")[0].split(".")[0] for c in cases} >= set(every)
    return cases


def _identity_values(value) -> list:
    if isinstance(value, (tuple, list)):
        return [("[0,2**63]", [0, 2**63]), ("65 dims", [1] * 65), ("'x'", "x"), ("[]", [])]
    out = [("none", None), ("missing", _MISSING), ("list", [value])]
    if isinstance(value, bool):
        return [*out, ("7", 7), ("'x'", "x")]
    if isinstance(value, int):
        return [*out, ("-1", -1), ("4096", 4096), ("1e9", 10**9), ("2**63", 2**63), ("'x'", "x")]
    if isinstance(value, float):
        return [*out, ("nan", math.nan), ("-1e300", -1e300), ("'x'", "x")]
    return [*out, ("5", 5), ("'../../x'", "../../x")]


def config_cases(text: str, game: str) -> list[Case]:
    """The saved config's text with one setting changed (model sizes above all: play and eval
    build the network it describes before its weights are loaded into it)."""
    first = next(iter(_section(text, f"game.{game}")), None)
    edits = [
        ("model", "hidden", "4096", ("play", "eval")),
        ("model", "hidden", "1000000000", ("play", "eval")),
        ("model", "hidden", "-1", ("play", "eval")),
        ("model", "hidden", '"x"', ("play", "eval")),
        ("model", "layers", "100000", ("play", "eval")),
        ("model", "channels", "1000000000", ()),
        ("run", "algo", '"nope"', ("play", "eval")),
        ("run", "action_repeat", "1000000000", ()),
        ("run", "seed", "-1", ()),
    ]
    if first is not None:
        edits += [(f"game.{game}", first, "1000000000", ()), (f"game.{game}", first, '"x"', ())]
    cases = [
        Case(
            f"config:{section}.{key}={value}",
            "header",
            READERS,
            refuse,
            _edit_config(section, key, value),
        )
        for section, key, value, refuse in edits
    ]
    cases.append(
        Case(
            "config=unparsable",
            "header",
            READERS,
            ("play", "eval"),
            _set(("config",), "[model\nhidden = "),
        )
    )
    return cases


def _section(text: str, section: str) -> list[str]:
    """The keys of ``[section]`` in a TOML text, in order."""
    lines = text.splitlines()
    if f"[{section}]" not in lines:
        return []
    keys = []
    for line in lines[lines.index(f"[{section}]") + 1 :]:
        if line.startswith("["):
            break
        if "=" in line:
            keys.append(line.split("=")[0].strip())
    return keys


def _edit_config(section: str, key: str, value: str):
    def apply(state):
        lines = state["config"].splitlines()
        if f"[{section}]" not in lines:
            lines.append(f"[{section}]")
        start = lines.index(f"[{section}]") + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
        at = [i for i in range(start, end) if lines[i].split("=")[0].strip() == key]
        if at:
            lines[at[0]] = f"{key} = {value}"
        else:
            lines.insert(start, f"{key} = {value}")
        state["config"] = "\n".join(lines) + "\n"

    return apply


def all_cases(state: dict, seed: int, per_leaf: int = 3, per_tensor: int = 2) -> list[Case]:
    """Every case for a base checkpoint's ``state``, the same for the same seed."""
    rng = np.random.default_rng(seed)
    cases = [
        *env_cases(state["env"], rng),
        *learner_cases(state, rng, per_leaf),
        *tensor_cases(state, rng, per_tensor),
        *header_cases(state, rng, per_leaf),
    ]
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids name one case each"
    return cases


def sample(cases: list[Case], seed: int, count: int) -> list[Case]:
    """``count`` cases drawn with ``seed``, every kind represented (all of them if fewer)."""
    if count >= len(cases):
        return cases
    rng = np.random.default_rng([seed, count])
    order = list(rng.permutation(len(cases)))
    kinds = {c.kind for c in cases}
    firsts = [next(i for i in order if cases[i].kind == k) for k in sorted(kinds)]
    chosen = firsts + [i for i in order if i not in firsts][: max(count - len(firsts), 0)]
    return [cases[i] for i in sorted(chosen)]

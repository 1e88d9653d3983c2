"""A file format for checkpoint states that cannot carry code: a JSON tree plus raw array bytes.

A state is a tree of dicts, lists and tuples whose leaves are None, bools, ints, floats,
strings, torch tensors and NumPy arrays (what every fasttrain trainer writes). ``encode`` turns
it into ``STATE_MAGIC``, the JSON header's length (8 bytes, big endian), the JSON header, then
the arrays' bytes one after another. ``decode`` reads it back with
``json.loads`` and ``frombuffer`` alone: nothing in the file names a Python object to build, so
a hostile file can at worst be refused, never run (safetensors' reasoning, for a whole tree).

The header's ``tree`` tags every container, so a key named like a tag is never misread::

    {"d": [[key, value], ...]}   a dict (keys: str or int, as optimizer states use)
    {"l": [...]} / {"t": [...]}  a list / a tuple
    {"T": k} / {"A": k}          the k-th entry of ``arrays``, as a torch tensor / NumPy array

Scalars are JSON's own (NaN and infinities as Python's ``json`` writes them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import torch

STATE_MAGIC = b"fasttrain-state3"  # 16 bytes: the payload of a format-3 checkpoint
MAX_DEPTH = 64  # containers nested deeper than any trainer's state are a hostile file
MAX_DIMS = 32  # NumPy 1's limit; fasttrain writes at most 6 (a replay buffer's frames)
# an empty array allocates nothing, but its other dimensions still enter stride arithmetic:
# they multiply to at most this (a non-empty array's are bounded by its bytes in the file)
MAX_EMPTY = 2**31
# A trainer's JSON header is a few KiB per rank (its tree, the config text, the array table).
# json builds up to ~36 bytes of Python objects per header byte (measured on a header of empty
# tables), so the header is bounded apart from the arrays: 16 MiB leaves room for thousands of
# ranks and caps what parsing it takes at about 600 MiB.
MAX_HEADER = 2**24
# dtypes a state may hold, by the name written in the header (torch's names; bfloat16 has no
# NumPy twin, so torch tensors are written through their raw bytes)
TORCH_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    )
}
NUMPY_DTYPES = {
    name: np.dtype(name)
    for name in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}


class StateFileError(ValueError):
    """The bytes are not a state this module wrote; the message says what is wrong, in a line."""


# ------------------------------------------------------------------------------- writing


def encode(state) -> list:
    """``state`` as a list of byte buffers that, joined, are its payload (no big copy made)."""
    arrays: list = []  # (kind, dtype name, shape, bytes view)
    tree = _encode(state, arrays, 0)
    offset, entries = 0, []
    for kind, dtype, shape, data in arrays:
        entries.append(
            {"kind": kind, "dtype": dtype, "shape": shape, "offset": offset, "nbytes": data.nbytes}
        )
        offset += data.nbytes
    header = json.dumps({"tree": tree, "arrays": entries}, separators=(",", ":")).encode()
    return [STATE_MAGIC + len(header).to_bytes(8, "big") + header, *(a[3] for a in arrays)]


def _encode(value, arrays: list, depth: int):
    if depth > MAX_DEPTH:
        raise TypeError(f"a state nested more than {MAX_DEPTH} deep")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise TypeError(f"a state cannot hold a {value.layout} tensor")
        tensor = value.detach().cpu().contiguous()
        name = str(tensor.dtype).removeprefix("torch.")
        if name not in TORCH_DTYPES:
            raise TypeError(f"a state cannot hold a {tensor.dtype} tensor")
        raw = tensor.reshape(-1).view(torch.uint8).numpy()  # any dtype as its bytes
        arrays.append(("torch", name, list(tensor.shape), memoryview(raw)))
        return {"T": len(arrays) - 1}
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        if array.dtype.name not in NUMPY_DTYPES:
            raise TypeError(f"a state cannot hold a {array.dtype} array")
        arrays.append(("numpy", array.dtype.name, list(array.shape), memoryview(array).cast("B")))
        return {"A": len(arrays) - 1}
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"a state's dict keys are str or int, got {type(key).__name__}")
            items.append([key, _encode(item, arrays, depth + 1)])
        return {"d": items}
    if isinstance(value, (list, tuple)):  # torch.Size is a tuple
        tag = "l" if isinstance(value, list) else "t"
        return {tag: [_encode(item, arrays, depth + 1) for item in value]}
    raise TypeError(f"a state cannot hold a {type(value).__name__}")


# ------------------------------------------------------------------------------- reading


def is_state(payload) -> bool:
    """Whether ``payload`` (bytes-like) is in this format."""
    return bytes(payload[: len(STATE_MAGIC)]) == STATE_MAGIC


def read_header(payload) -> dict:
    """The JSON header of a payload (``tree`` and ``arrays``), checked; no array is read."""
    view = memoryview(payload)
    start = len(STATE_MAGIC) + 8
    if len(view) < start or not is_state(view):
        raise StateFileError("not a fasttrain state")
    size = int.from_bytes(view[len(STATE_MAGIC) : start], "big")
    if size > len(view) - start:
        raise StateFileError("its header is cut short")
    if size > MAX_HEADER:
        raise StateFileError(f"its header is {size:,} bytes (at most {MAX_HEADER:,})")
    try:
        header = json.loads(bytes(view[start : start + size]))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise StateFileError("its header is not valid JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise StateFileError("its header has no list of arrays")
    area = len(view) - start - size
    for k, entry in enumerate(header["arrays"]):
        _check_entry(k, entry, area)
    _check_disjoint(header["arrays"])
    header["_start"] = start + size  # where the arrays' area begins in the payload
    return header


def _check_disjoint(entries: list) -> None:
    """No two arrays share bytes: ``encode`` writes each once, one after another, so arrays
    that overlap are a file made to be decoded into more memory than it takes (each array is
    copied out of the file), and are refused. The arrays decoded then total at most the
    payload's size."""
    end = 0
    for entry in sorted((e for e in entries if e["nbytes"]), key=lambda e: e["offset"]):
        if entry["offset"] < end:
            raise StateFileError("two of its arrays share bytes")
        end = entry["offset"] + entry["nbytes"]


def _check_entry(k: int, entry, area: int) -> None:
    if not isinstance(entry, dict):
        raise StateFileError(f"array {k} is not described by a table")
    kind, dtype, shape = entry.get("kind"), entry.get("dtype"), entry.get("shape")
    dtypes = {"torch": TORCH_DTYPES, "numpy": NUMPY_DTYPES}.get(kind)
    if dtypes is None or dtype not in dtypes:
        raise StateFileError(f"array {k} has a kind or dtype fasttrain does not write")
    ints = (entry.get("offset"), entry.get("nbytes"))
    if not isinstance(shape, list) or not all(_count(n) for n in (*shape, *ints)):
        raise StateFileError(f"array {k} has a bad shape, offset or size")
    if len(shape) > MAX_DIMS:
        raise StateFileError(f"array {k} has {len(shape)} dimensions (at most {MAX_DIMS})")
    itemsize = dtypes[dtype].itemsize
    if math.prod(shape) * itemsize != entry["nbytes"] or entry["offset"] + entry["nbytes"] > area:
        raise StateFileError(f"array {k} does not fit the file")
    if math.prod(n for n in shape if n) > MAX_EMPTY and not entry["nbytes"]:
        raise StateFileError(f"array {k} of shape {shape} is empty, yet too large to shape")


def _count(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


@dataclass(frozen=True)
class ArrayInfo:
    """What the header says of one array, read without its bytes (``skeleton``)."""

    kind: str  # "torch" or "numpy"
    dtype: str
    shape: tuple

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def decode(payload):
    """The state ``encode`` wrote into ``payload``; ``StateFileError`` for anything else."""
    header = read_header(payload)
    view = memoryview(payload)[header["_start"] :]
    arrays = [_array(view, entry) for entry in header["arrays"]]
    return _decode(header.get("tree"), arrays, 0)


def skeleton(payload):
    """The state's tree with an ``ArrayInfo`` in place of each array: its structure, sizes and
    scalars, with no array read."""
    header = read_header(payload)
    infos = [ArrayInfo(e["kind"], e["dtype"], tuple(e["shape"])) for e in header["arrays"]]
    return _decode(header.get("tree"), infos, 0)


def _array(view: memoryview, entry: dict):
    data = view[entry["offset"] : entry["offset"] + entry["nbytes"]]
    if entry["kind"] == "numpy":  # a copy: the state outlives the file's bytes
        return np.frombuffer(data, NUMPY_DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()
    dtype = TORCH_DTYPES[entry["dtype"]]
    if not entry["nbytes"]:  # no bytes to view as the dtype
        return torch.empty(entry["shape"], dtype=dtype)
    raw = torch.from_numpy(np.frombuffer(data, np.uint8).copy())
    return raw.view(dtype).reshape(entry["shape"])


def _kind(array) -> str:
    return "torch" if isinstance(array, torch.Tensor) else "numpy"


def _decode(node, arrays: list, depth: int):
    if depth > MAX_DEPTH:
        raise StateFileError(f"its tree is nested more than {MAX_DEPTH} deep")
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise StateFileError("its tree holds a value fasttrain does not write")
    ((tag, body),) = node.items()
    if tag in ("T", "A"):
        if not _count(body) or body >= len(arrays):
            raise StateFileError("its tree names an array it does not hold")
        array = arrays[body]
        kind = array.kind if isinstance(array, ArrayInfo) else _kind(array)
        if kind != ("torch" if tag == "T" else "numpy"):
            raise StateFileError("its tree names an array of the other kind")
        return array
    if not isinstance(body, list):
        raise StateFileError("its tree holds a value fasttrain does not write")
    if tag == "l":
        return [_decode(item, arrays, depth + 1) for item in body]
    if tag == "t":
        return tuple(_decode(item, arrays, depth + 1) for item in body)
    if tag == "d":
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise StateFileError("its tree holds a dict entry that is not a pair")
            key = pair[0]
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise StateFileError("its tree holds a dict key that is not a str or int")
            out[key] = _decode(pair[1], arrays, depth + 1)
        return out
    raise StateFileError("its tree holds a value fasttrain does not write")

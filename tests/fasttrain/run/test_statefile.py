"""fasttrain.run.statefile: the checkpoint payload format (a JSON header and raw array bytes) gives
back every leaf it writes bit for bit, refuses what fasttrain never writes, and refuses a crafted
payload in one line, never building an object the header names."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fasttrain.errors import ConfigError
from fasttrain.run import checkpoint, statefile
from tests.fasttrain.run.test_checkpoint import with_header


def every_kind_of_leaf() -> dict:
    torch_dtypes = list(statefile.TORCH_DTYPES.values())
    return {
        "tensors": {
            str(d): (torch.arange(6, dtype=torch.float64) * 1.5 - 3).to(d).reshape(2, 3)
            for d in torch_dtypes
        },
        "scalar tensor": torch.tensor(7.25),
        "empty tensor": torch.zeros((0, 4), dtype=torch.bfloat16),
        "strided tensor": torch.arange(12).reshape(3, 4).t(),
        "arrays": {
            name: (np.arange(6) % 2).astype(d) for name, d in statefile.NUMPY_DTYPES.items()
        },
        "uint64 max": np.array([2**64 - 1, 0], dtype=np.uint64),
        "int keys": {0: {"step": torch.tensor(3.0)}, 17: "x"},
        "tuple": (0.9, 0.999),
        "list": [1, "two", None, True, False, [3.5, {"deep": (1,)}]],
        "floats": [math.nan, math.inf, -math.inf, 1e-310, 3.0],
        "big int": 2**64 - 1,
        "numpy scalars": [np.float32(1.5), np.int64(-4)],
        "size": torch.Size([2, 3]),
        'key named like a tag {"T": 0}': {"T": 0, "A": 1, "d": [], "l": [], "t": []},
    }


def same(a, b) -> bool:
    """Equal values of the same types; tensors and arrays byte for byte (NaN and -0.0 too)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or (a.dtype, a.shape) != (b.dtype, b.shape):
            return False
        return torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
        )
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            type(b) is (tuple if isinstance(a, tuple) else list)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b and type(b) in (type(a), float if isinstance(a, np.floating) else int)


def test_the_state_format_gives_back_every_leaf_bit_for_bit():
    state = every_kind_of_leaf()
    decoded = statefile.decode(b"".join(bytes(c) for c in statefile.encode(state)))
    assert same(state, decoded)
    assert type(decoded["numpy scalars"][0]) is float and type(decoded["numpy scalars"][1]) is int


def test_the_state_format_refuses_what_fasttrain_never_writes():
    for value in (object(), {1.5: "float key"}, np.array(["text"]), torch.zeros(2, 2).to_sparse()):
        with pytest.raises(TypeError):
            statefile.encode({"x": value})


def craft(tree, arrays=(), blob=b"") -> bytes:
    """A payload with this header, as an attacker would write it."""
    header = json_bytes({"tree": tree, "arrays": list(arrays)})
    return statefile.STATE_MAGIC + len(header).to_bytes(8, "big") + header + blob


def json_bytes(value) -> bytes:
    import json

    return json.dumps(value).encode()


def json_nested(depth: int):
    node = 1
    for _ in range(depth):
        node = {"l": [node]}
    return node


ONE = {"kind": "torch", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}


CRAFTED = {
    "unknown tag": craft({"X": 1}),
    "a tag beside another": craft({"l": [], "d": []}),
    "unknown dtype": craft({"T": 0}, [{**ONE, "dtype": "object"}], bytes(8)),
    "unknown kind": craft({"T": 0}, [{**ONE, "kind": "pickle"}], bytes(8)),
    "bytes past the end": craft({"T": 0}, [ONE], bytes(4)),
    "size and shape disagree": craft({"T": 0}, [{**ONE, "nbytes": 4}], bytes(8)),
    "negative shape": craft({"T": 0}, [{**ONE, "shape": [-2]}], bytes(8)),
    "array index past the list": craft({"T": 3}, [ONE], bytes(8)),
    "torch tag on a numpy array": craft({"T": 0}, [{**ONE, "kind": "numpy"}], bytes(8)),
    "dict entry not a pair": craft({"d": [["a", 1, 2]]}),
    "float dict key": craft({"d": [[1.5, 1]]}),
    "nested too deep": craft(json_nested(200)),
    "header not JSON": statefile.STATE_MAGIC + (4).to_bytes(8, "big") + b"{{{{",
    "header longer than the file": statefile.STATE_MAGIC + (99).to_bytes(8, "big") + b"{}",
    "65 dimensions": craft({"T": 0}, [{**ONE, "shape": [1] * 63 + [2, 1]}], bytes(8)),
    "an empty array too large to shape": craft(
        {"T": 0}, [{**ONE, "shape": [0, 2**63], "nbytes": 0}], bytes(8)
    ),
    "two arrays share bytes": craft(
        {"l": [{"T": 0}, {"T": 1}]}, [ONE, {**ONE, "offset": 4}], bytes(16)
    ),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_state_is_refused_in_one_line(name, tmp_path):
    with pytest.raises(statefile.StateFileError):
        statefile.decode(CRAFTED[name])
    path = tmp_path / checkpoint.FILENAME
    path.write_bytes(with_header(CRAFTED[name]))
    with pytest.raises(
        ConfigError, match=r"^checkpoint \S+ is not a fasttrain checkpoint: [^\n]+$"
    ):
        checkpoint.load(path)


def test_refusals_of_shapes_and_aliases_name_what_is_wrong():
    messages = {
        "65 dimensions": "array 0 has 65 dimensions (at most 32)",
        "an empty array too large to shape": (
            f"array 0 of shape [0, {2**63}] is empty, yet too large to shape"
        ),
        "two arrays share bytes": "two of its arrays share bytes",
    }
    for name, message in messages.items():
        for read in (statefile.decode, statefile.skeleton):
            with pytest.raises(statefile.StateFileError) as refusal:
                read(CRAFTED[name])
            assert str(refusal.value) == message, name


def test_a_header_past_its_bound_is_refused_before_it_is_parsed(monkeypatch):
    monkeypatch.setattr(statefile, "MAX_HEADER", 64)
    payload = craft({"l": [{"d": []}] * 16})
    with pytest.raises(statefile.StateFileError, match=r"^its header is \d+ bytes \(at most 64\)$"):
        statefile.decode(payload)
    monkeypatch.setattr(statefile, "MAX_HEADER", len(payload))
    assert statefile.decode(payload) == [{}] * 16


def test_arrays_aliasing_one_region_are_refused_before_any_is_copied():
    """1,500 entries naming the same 1 MiB would decode into 1.5 GiB: refused while the
    header is read, with no more than the file's size allocated."""
    import tracemalloc

    size = 2**20
    entry = {"kind": "numpy", "dtype": "uint8", "shape": [size], "offset": 0, "nbytes": size}
    payload = craft({"l": [{"A": k} for k in range(1500)]}, [entry] * 1500, bytes(size))
    tracemalloc.start()
    try:
        with pytest.raises(statefile.StateFileError, match="^two of its arrays share bytes$"):
            statefile.decode(payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(payload), peak


def test_a_deflated_zip_is_refused_unread_without_inflating_it(tmp_path):
    """torch.save writes a zip (fasttrain's development format 1): a small one that would
    inflate a thousand times is refused by its first bytes; nothing decompresses it."""
    import tracemalloc
    import zipfile

    path = tmp_path / checkpoint.FILENAME
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            for _ in range(16):
                member.write(bytes(2**24))  # 256 MiB of zeros, about 256 KiB deflated
    size = path.stat().st_size
    assert size < 2**19
    tracemalloc.start()
    try:
        for read in (checkpoint.load, checkpoint.describe):
            with pytest.raises(ConfigError, match="is a pickle .* never unpickles a file$"):
                read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * size, peak

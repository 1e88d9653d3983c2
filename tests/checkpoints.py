"""Well-formed checkpoints with one bad value, as anyone can write them: for the tests of what
the readers check, and for a checkpoint fuzzer.

A checksum says a file is intact, not that it is sane: ``write_mutated`` reads a real
checkpoint's state (without any of the readers' checks), changes the value at one ``path``
and saves the result with the project's own ``checkpoint.save``, so the file has a valid
header and SHA-256 and only the value differs. A path is a tuple of keys, one per level:
dict keys and list or tuple indices, e.g. ``("optimizer", "param_groups", 0, "lr")``.

    state = read(run_dir)
    get(state, ("model", "actor.weight"))
    bad = mutated(state, ("global_step",), -1000)            # a copy; ``state`` is unchanged
    bad = mutated(state, ("time_s",), DELETE)                # the entry removed
    bad = mutated(state, ("model", "actor.bias"), lambda t: t * 1e30)   # from the old value
    write_mutated(run_dir, tmp_path / "run", ("iteration",), True)      # a run dir to read
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from fasttrain.run import checkpoint

DELETE = object()  # the value that removes the entry at a path


def read(path) -> dict:
    """The state in a checkpoint (a run directory or a ``.pt`` file), checksum verified and
    otherwise unchecked, so an already mutated one can be mutated again."""
    return checkpoint.read_state(path)


def get(state, path: tuple):
    """The value at ``path`` in ``state``."""
    for key in path:
        state = state[key]
    return state


def mutated(state: dict, path: tuple, value) -> dict:
    """A deep copy of ``state`` with the entry at ``path`` set to ``value`` (``DELETE``
    removes it; a callable is given the old value and returns the new one). Every container
    along the path must exist; the last key may be new (a dict entry the file lacked)."""
    if not path:
        raise ValueError("a path names at least one key")
    state = copy.deepcopy(state)
    return _set(state, tuple(path), value)


def _set(node, path: tuple, value):
    key, rest = path[0], path[1:]
    if isinstance(node, tuple):  # tuples are rebuilt around the change
        return tuple(_set(list(node), path, value))
    if rest:
        node[key] = _set(node[key], rest, value)
    elif value is DELETE:
        del node[key]
    else:
        node[key] = _new(node[key] if _has(node, key) else None, value)
    return node


def _has(node, key) -> bool:
    return key in node if isinstance(node, dict) else -len(node) <= key < len(node)


def _new(old, value):
    return value(old) if callable(value) else value


def save(path, state: dict) -> Path:
    """Write ``state`` as a checkpoint at ``path`` (a ``.pt`` file or a run directory) with a
    valid header and digest, whatever it holds (a mutated ``format`` included)."""
    target = checkpoint.checkpoint_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(target, state)  # save's own "format" is overridden by the state's
    return target


def write_mutated(source, dest, path: tuple, value) -> Path:
    """A copy of the run directory (or checkpoint file) ``source`` at ``dest`` whose checkpoint
    has ``value`` at ``path`` (see ``mutated``), digest valid; returns ``dest``."""
    source, dest = Path(source), Path(dest)
    if source.is_dir():
        shutil.copytree(source, dest, dirs_exist_ok=True)
    state = mutated(read(source), path, value)
    save(dest, state)
    return dest

"""The one import rule, read from the source: no cycles in the package (imports inside functions
count), fasttrain.kernels knows no torch, games or learner side, fasttrain.games knows no torch,
and the rooms stack: the configuration (torch-free at load) knows no learner trainer and no run,
the learner side knows no run, the run knows nothing built on it (the CLI, bench, sweeps)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.cli import ROOT


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by its import name."""
    out = {}
    for path in sorted((ROOT / "fasttrain").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Package modules that ``name`` imports anywhere in its file (functions included)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod where one exists
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    edges = {}
    for name, path in mods.items():
        targets = set()
        for target in imports(name, path, known):
            # importing a.b.c names the deepest package module it reaches
            while target and target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                targets.add(target)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def external_imports(path: Path) -> set[str]:
    """Top-level names of every module imported anywhere in ``path`` (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_the_package_has_no_import_cycle():
    edges = graph()
    assert len(edges) > 20 and edges["fasttrain.run.runner"], "the walk found the package"
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_hidden_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_inside_functions_count(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from .backends import x\n    import fasttrain.games\n")
    found = imports("fasttrain.kernels.m", module, {"fasttrain.kernels.backends"})
    assert {"fasttrain.kernels.backends", "fasttrain.games"} <= found


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("fasttrain.kernels")))
def test_kernels_import_no_torch_games_or_learner_side(name):
    path = modules()[name]
    for target in external_imports(path):
        assert target.split(".")[0] != "torch", f"{name} imports {target}"
        if target.startswith("fasttrain"):
            assert target.startswith("fasttrain.kernels"), f"{name} imports {target}"
    for target in graph()[name]:
        assert target.startswith("fasttrain.kernels"), f"{name} imports {target}"


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("fasttrain.games")))
def test_games_import_no_torch(name):
    for target in external_imports(modules()[name]):
        assert target.split(".")[0] != "torch", f"{name} imports {target}"


# the rooms above the kernels and games, and the rooms each may not import (a module imports its
# own room, the rooms below it and the top-level modules below the run): the configuration is
# torch-free and knows no run; the learner side knows no run; the run knows nothing built on it
ROOMS = {
    "fasttrain.config": (
        "fasttrain.learners.",
        "fasttrain.run",
        "fasttrain.cli",
        "fasttrain.bench",
    ),
    "fasttrain.learners": ("fasttrain.run", "fasttrain.cli", "fasttrain.bench", "fasttrain.sweep"),
    "fasttrain.run": ("fasttrain.cli", "fasttrain.bench", "fasttrain.sweep", "fasttrain.evaluate"),
}
# the learner side's torch-free half: the registry and each learner's config, which the
# configuration reads to check a command before torch loads
LEARNER_DECLARATIONS = ("fasttrain.learners", "fasttrain.learners.ranks")


def room_of(name: str) -> str | None:
    return next((room for room in ROOMS if name == room or name.startswith(room + ".")), None)


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_no_room_imports_a_room_above_it(room):
    edges, bad = graph(), []
    for name, targets in edges.items():
        if room_of(name) != room:
            continue
        for target in targets:
            allowed = target in LEARNER_DECLARATIONS or target.endswith("_config")
            if any(target.startswith(p) for p in ROOMS[room]) and not allowed:
                bad.append(f"{name} -> {target}")
    assert not bad, "imports back up the layers:\n" + "\n".join(bad)


def test_the_room_rule_finds_an_import_back_up(tmp_path):
    edges = {"fasttrain.learners.ppo": {"fasttrain.run.runner"}}
    room = room_of("fasttrain.learners.ppo")
    assert room == "fasttrain.learners"
    assert any(t.startswith(ROOMS[room]) for t in edges["fasttrain.learners.ppo"])
    assert room_of("fasttrain.configure") is None and room_of("fasttrain.config.read")


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("fasttrain.config")))
def test_the_configuration_imports_no_torch_at_load(name):
    """Only imports at a module's top level: a config is checked before torch loads (its
    validation of a network's size imports torch inside the function that needs it)."""
    tree = ast.parse(modules()[name].read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any((n or "").split(".")[0] == "torch" for n in names), name

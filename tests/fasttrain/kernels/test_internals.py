"""Every private torch and Numba name fasttrain uses resolves against the installed versions
(a failure names the one an upgrade broke), and none is reached except through the list."""

from __future__ import annotations

import ast
import importlib

import pytest

from fasttrain.kernels import internals
from tests.cli import ROOT

PACKAGE = ROOT / "fasttrain"


@pytest.mark.parametrize("internal", internals.INTERNALS, ids=lambda i: i.path)
def test_each_listed_internal_exists_in_the_installed_version(internal):
    if internal.extra:
        try:
            importlib.import_module(internal.extra)
        except ImportError:
            pytest.skip(f"{internal.extra} is not installed")
    instance = None
    if internal.on_instance:
        owner = internal.path.rpartition(".")[0]
        module, _, cls = owner.rpartition(".")
        instance = getattr(importlib.import_module(module), cls)()
    try:
        internals.resolve(internal.path, instance)
    except internals.InternalMissing as exc:
        pytest.fail(f"{internal.path} ({internal.why}) is gone: {exc}")


def test_a_missing_internal_is_named_and_an_unlisted_one_refused(monkeypatch):
    gone = internals.Internal("torch.nn.no_such_thing_", "a test's")
    monkeypatch.setitem(internals._LISTED, gone.path, gone)
    with pytest.raises(internals.InternalMissing, match=r"torch\.nn\.no_such_thing_"):
        internals.resolve(gone.path)
    with pytest.raises(ImportError):  # callers that tolerate a missing one catch ImportError
        internals.resolve(gone.path)
    with pytest.raises(KeyError, match="torch._C._not_listed"):
        internals.resolve("torch._C._not_listed")
    assert internals.name("numba.core.cpu.CPUTargetOptions._nrt") == "_nrt"


def test_assign_sets_a_listed_setting_and_refuses_a_missing_one(monkeypatch):
    import torch._dynamo.config as dynamo_config

    path = "torch._dynamo.config.recompile_limit"
    monkeypatch.setattr(dynamo_config, "recompile_limit", dynamo_config.recompile_limit)
    internals.assign(path, 1234)
    assert dynamo_config.recompile_limit == 1234 == internals.resolve(path)
    gone = internals.Internal("torch._dynamo.config.no_such_setting_", "a test's")
    monkeypatch.setitem(internals._LISTED, gone.path, gone)
    with pytest.raises(internals.InternalMissing, match="no_such_setting_"):
        internals.assign(gone.path, 1)
    assert not hasattr(dynamo_config, "no_such_setting_")


def private_uses(tree: ast.AST) -> list[str]:
    """Imports of private torch or Numba modules and ``torch._name`` attributes in ``tree``."""
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = [f"{node.value.id}.{node.attr}"]
        for name in names:
            parts = name.split(".")
            if parts[0] not in ("torch", "numba"):
                continue
            private = any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
            if private or name.startswith(("numba.core", "numba.cuda.cudadrv")):
                found.append(name)
    return found


def test_the_package_reaches_private_names_only_through_the_list():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "internals.py" and path.parent.name == "kernels":
            continue
        for name in private_uses(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert not offenders, "use fasttrain.kernels.internals.resolve for: " + "; ".join(offenders)


def test_the_scan_finds_a_private_import_and_attribute():
    source = "import torch._dynamo\nfrom numba.core import ir\nx = torch._foreach_add_\n"
    assert private_uses(ast.parse(source)) == [
        "torch._dynamo",
        "numba.core.ir",
        "torch._foreach_add_",
    ]

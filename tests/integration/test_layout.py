"""The tests mirror the package: every module with behaviour has a test file of its name, so
whoever changes ``fasttrain/<path>/<module>.py`` knows to run ``tests/fasttrain/<path>/
test_<module>.py`` first (a package's ``__init__.py`` is tested under the package's name)."""

from __future__ import annotations

from pathlib import Path

from tests.cli import ROOT

# modules with no behaviour of their own to test in a file of their name, and why
NO_TEST_FILE = {
    "fasttrain/__main__.py": "calls fasttrain.cli.main; tests/integration/test_faults.py runs it",
    "fasttrain/adapters/__init__.py": "a docstring: the adapters are its modules",
    "fasttrain/kernels/__init__.py": "re-exports its modules' names (tested in their files)",
    "fasttrain/config/__init__.py": "a docstring: the configuration is its modules",
    "fasttrain/run/__init__.py": "a docstring: the run is its modules",
}


def mirror_of(module: Path) -> Path:
    """Where the tests of ``module`` (a path under the checkout) live."""
    parts = module.with_suffix("").parts
    if parts[-1] == "__init__":
        return Path("tests", *parts[:-2], f"test_{parts[-2]}.py")
    return Path("tests", *parts[:-1], f"test_{parts[-1]}.py")


def test_every_module_with_behaviour_has_a_mirror_of_its_name():
    modules = sorted(p.relative_to(ROOT) for p in (ROOT / "fasttrain").rglob("*.py"))
    assert len(modules) > 50
    missing = [
        f"{module} -> {mirror_of(module)}"
        for module in modules
        if str(module) not in NO_TEST_FILE and not (ROOT / mirror_of(module)).is_file()
    ]
    assert not missing, "modules without a test file of their name:\n" + "\n".join(missing)
    for module in NO_TEST_FILE:  # the exceptions still exist and still have no such file
        assert (ROOT / module).is_file() and not (ROOT / mirror_of(Path(module))).exists()


def test_the_mirror_maps_modules_and_packages_as_the_contributing_guide_says():
    assert mirror_of(Path("fasttrain/kernels/env.py")) == Path(
        "tests/fasttrain/kernels/test_env.py"
    )
    assert mirror_of(Path("fasttrain/games/__init__.py")) == Path("tests/fasttrain/test_games.py")
    assert mirror_of(Path("fasttrain/__init__.py")) == Path("tests/test_fasttrain.py")

"""fasttrain.kernels.build: source digests (the cache key of a compiled game) follow its sources;
generated files stay inside the cache and a damaged one is written again."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys

import pytest

import fasttrain.games.snake as snake_module
from fasttrain.games.snake import SPEC
from fasttrain.kernels.build import cache_dir, load_module, source_digest


def _load_variant(tmp_path, monkeypatch, name, edit):
    """Import a copy of snake.py with ``edit(text)`` applied, under a fresh module name."""
    text = inspect.getsource(snake_module)
    new_text = edit(text)
    path = tmp_path / f"{name}.py"
    path.write_text(new_text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _replace_once(old, new):
    def edit(text):
        assert text.count(old) == 1, old
        return text.replace(old, new)

    return edit


def test_source_digest_is_stable_across_processes():
    code = (
        "from fasttrain.games.snake import SPEC\n"
        "from fasttrain.kernels.build import source_digest\n"
        "print(source_digest(SPEC, 'cpu'), source_digest(SPEC, 'python'))\n"
    )
    # a different string-hash seed than this process: digests must not depend on it
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == [source_digest(SPEC, "cpu"), source_digest(SPEC, "python")]


def test_source_digest_depends_on_backend_tag():
    digests = {source_digest(SPEC, tag) for tag in ("", "python", "cpu", "cpu {'inline': 'never'}")}
    assert len(digests) == 4


def test_source_digest_follows_sources_and_constants(tmp_path, monkeypatch):
    same = _load_variant(tmp_path, monkeypatch, "snake_same", lambda text: text)
    assert source_digest(same.SPEC, "cpu") == source_digest(SPEC, "cpu")  # location is not hashed
    # a callee of step_one (move_head), a constant reset_one reads, step_one's own body
    edits = {
        "snake_callee": _replace_once("return r - 1, c", "return r - 2, c"),
        "snake_const": _replace_once("START_LENGTH = 3", "START_LENGTH = 4"),
        "snake_step": _replace_once("reward = p.reward_death", "reward = 2 * p.reward_death"),
    }
    digests = {source_digest(SPEC, "cpu")}
    for name, edit in edits.items():
        digests.add(source_digest(_load_variant(tmp_path, monkeypatch, name, edit).SPEC, "cpu"))
    assert len(digests) == 1 + len(edits)


@pytest.mark.parametrize("name", ["../evil", "../../tmp/evil", "a/b", "x.y", "", "/abs"])
def test_load_module_never_writes_outside_the_cache(tmp_path, monkeypatch, name):
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="would be written outside the kernel cache"):
        load_module(name, "X = 1\n", {})
    assert not any(tmp_path.rglob("*.py"))  # nothing written, in the cache or beside it


def test_a_truncated_generated_file_is_written_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(tmp_path))
    text = "# generated\nX = 41\nY = X + 1\n"
    assert load_module("truncated_test", text, {}).Y == 42
    path = cache_dir() / "truncated_test.py"
    path.write_text(text[:15])  # a killed writer's half file
    assert load_module("truncated_test", text, {}).Y == 42
    assert path.read_text() == text


# ------------------------------------------------------------------ a kernel cache is code

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="Windows has no such modes")


def refusal(path, problem: str, fix: str = "use a folder only you can write") -> str:
    return (
        f"kernel cache {path} {problem}; a kernel cache is code: {fix} or set FASTTRAIN_CACHE_DIR"
    )


@posix_only
@pytest.mark.parametrize("mode, who", [(0o777, "others"), (0o1777, "others"), (0o770, "its group")])
def test_a_cache_others_may_write_is_refused_before_anything_in_it_loads(
    tmp_path, monkeypatch, mode, who
):
    root = tmp_path / "cache"
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "planted_test.py").write_text("LOADED = True\n")
    root.chmod(mode)
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(root))
    with pytest.raises(PermissionError) as info:
        load_module("planted_test", "LOADED = False\n", {})
    fix = f"use a folder only you can write (chmod go-w {root})"
    assert str(info.value) == refusal(root, f"is writable by {who} (mode {mode:04o})", fix)
    assert "fasttrain_generated_planted_test" not in sys.modules  # nothing was imported
    assert (root / "kernels" / "planted_test.py").read_text() == "LOADED = True\n"  # nor written


@posix_only
@pytest.mark.parametrize("inner", ["kernels", "kernels/__pycache__"])
def test_every_folder_fasttrain_makes_in_the_cache_is_checked(tmp_path, monkeypatch, inner):
    root = tmp_path / "cache"
    (root / inner).mkdir(parents=True)
    (root / inner).chmod(0o775)
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(root))
    with pytest.raises(PermissionError) as info:
        load_module("group_test", "X = 1\n", {})
    fix = f"use a folder only you can write (chmod go-w {root / inner})"
    assert str(info.value) == refusal(root / inner, "is writable by its group (mode 0775)", fix)


@posix_only
def test_a_cache_another_user_owns_is_refused(tmp_path, monkeypatch):
    from fasttrain.kernels import build

    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(tmp_path))
    owner = os.stat(tmp_path).st_uid
    monkeypatch.setattr(build.os, "geteuid", lambda: owner + 1)  # as the user after the owner
    with pytest.raises(PermissionError) as info:
        load_module("owned_test", "X = 1\n", {})
    problem = f"is owned by another user (uid {owner}; you are {owner + 1})"
    assert str(info.value) == refusal(tmp_path, problem)


@posix_only
def test_the_cache_folders_fasttrain_makes_only_their_owner_may_write(tmp_path, monkeypatch):
    root = tmp_path / "new" / "cache"
    monkeypatch.setenv("FASTTRAIN_CACHE_DIR", str(root))
    previous = os.umask(0)  # the loosest umask: the folders are still 0700
    try:
        assert load_module("private_test", "X = 41\n", {}).X == 41
    finally:
        os.umask(previous)
    for folder in (root, root / "kernels", root / "kernels" / "__pycache__"):
        assert os.stat(folder).st_mode & 0o777 == 0o700, folder
    root.chmod(0o755)  # a cache others may read but not write is the user's own
    assert load_module("private_test", "X = 42\n", {}).X == 42

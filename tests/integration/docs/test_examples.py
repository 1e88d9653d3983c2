"""Every example of README.md and docs/ runs (python blocks, fasttrain lines, toml blocks), at
a tiny size, each page in its own folder; see ``examples.py`` beside it."""

from __future__ import annotations

import shutil

import pytest

from tests.cli import sets
from tests.integration.docs.examples import (
    ROOT,
    ExampleFailed,
    blocks,
    command_lines,
    pages,
    run_page,
    tiny,
)

PAGES = pages()


@pytest.fixture
def page_folder(tmp_path, monkeypatch):
    """A working folder with what the examples name from the repository: examples/ and
    config.toml."""
    for name in ("examples", "config.toml"):
        try:
            (tmp_path / name).symlink_to(ROOT / name)
        except OSError:  # Windows without the privilege to make symlinks: a copy reads the same
            copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
            copy(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_examples_of_a_page_run(page, page_folder):
    done = run_page(page)
    assert all(line.split(":")[0] == str(page.relative_to(ROOT)) for line in done)


def test_every_page_is_found_and_the_examples_are_many():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "docs/quickstart.md", "docs/games.md", "docs/training.md"} <= names
    found = [b for p in PAGES for b in blocks(p)]
    python = [b for b in found if b.lang == "python"]
    commands = [c for b in found if b.lang == "bash" for c in command_lines(b)]
    assert len(python) >= 10 and len(commands) >= 40, (len(python), len(commands))
    # every block has a language: an unmarked block would go unchecked
    assert [b.origin for b in found if not b.lang] == []


def test_a_broken_example_names_its_file_and_line(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nx = 1\n```\n\n```bash\nfasttrain games\n"
        "fasttrain run --game snake --stepz 10\n```\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExampleFailed, match=r"^page\.md:7: `fasttrain run --game snake --stepz"):
        run_page(page, root=tmp_path)
    page.write_text("Text.\n\n```python\nimport fasttrain\nfasttrain.make('snek')\n```\n")
    with pytest.raises(ExampleFailed, match=r"(?s)^page\.md:3: python block failed.*snek"):
        run_page(page, root=tmp_path)
    page.write_text("```toml\n[ppo]\nlearning_rat = 0.1\n```\n")
    with pytest.raises(ExampleFailed, match=r"(?s)^page\.md:1: toml block failed.*learning_rat"):
        run_page(page, root=tmp_path)
    # a benchmark is only parsed, and an option it does not have fails all the same
    page.write_text("```bash\nfasttrain bench --quick --game snake --fast\n```\n")
    with pytest.raises(ExampleFailed, match=r"^page\.md:1: .*\(parse as .*--fast"):
        run_page(page, root=tmp_path)


def test_long_commands_are_made_tiny_or_only_parsed():
    smoke = sets("ppo.num_envs=16", "ppo.num_steps=8", "ppo.num_minibatches=2")
    mode, args = tiny(["run", "--game", "snake"])
    assert mode == "run" and args[:7] == ["run", *smoke]
    assert args[-6:] == ["--game", "snake", "--steps", "256", "--set", "log.curves=false"]
    mode, args = tiny(["run", "--game", "cartpole", "--algo", "dqn", "--num-envs", "64"])
    assert "dqn.learning_starts=128" in args and args[args.index("--num-envs") + 1] == "8"
    mode, args = tiny(["run", "--resume", "runs/a", "--steps", "4000000"])
    assert (mode, args) == ("run", ["run", "--resume", "runs/a", "--steps", "400"])  # as it was
    assert tiny(["run", "--nproc", "2"])[0] == "parse"
    assert tiny(["bench", "--quick"]) == ("parse", ["bench", "--quick"])
    assert tiny(["torchrun", "run", "--game", "snake"]) == ("parse", ["run", "--game", "snake"])
    assert tiny(["eval", "--run", "r", "--episodes", "500"])[1][-1] == "16"
    assert tiny(["play", "--game", "snake"])[1][-2:] == ["--steps", "50"]

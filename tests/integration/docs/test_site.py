"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing page or
an unknown reference fails it; and every docs page a code comment points at exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.integration.docs.examples import ROOT

pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out, done.stderr


def test_the_site_builds_strict_with_every_page_and_picture(site):
    out, log = site
    for page in (
        "quickstart",
        "games",
        "training",
        "algorithms",
        "agents",
        "evaluation",
        "sweep",
        "performance",
        "kernels",
        "distributed",
        "api",
        "config",
        "contributing",
    ):
        assert (out / page / "index.html").is_file(), page
    assert "WARNING" not in log, log
    games = (out / "games" / "index.html").read_text()
    for name in ("snake", "cartpole", "arena", "minatar-seaquest"):
        assert f'src="../assets/games/{name}.gif"' in games, name  # the GIF, generated
    assert "<code>max_snake_length</code>" in games  # the arena's parameter table
    api = (out / "api" / "index.html").read_text()
    assert "KernelEnv" in api and "load_agent" in api and "replay_frames" in api


def anchors(html: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', html))


def test_every_docs_anchor_the_code_points_at_exists(site):
    out, _ = site
    pointers = set()
    for folder in ("fasttrain", "kernels", "games"):
        for path in (ROOT / folder).rglob("*.py"):
            pointers |= set(re.findall(r"docs/(\w+)\.md#([\w-]+)", path.read_text()))
    assert pointers, "the code points at docs/performance.md"
    for page, anchor in sorted(pointers):
        assert anchor in anchors((out / page / "index.html").read_text()), f"{page}.md#{anchor}"


def test_the_readme_links_and_pictures_exist_and_stay_small():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(local) >= 10, local
    for target in local:
        assert (ROOT / target).exists(), target
    pictures = [
        *(ROOT / "docs" / "assets").rglob("*.gif"),
        *(ROOT / "docs" / "assets").rglob("*.png"),
    ]
    assert len(pictures) >= 10
    for picture in pictures:  # committed pictures stay small
        assert picture.stat().st_size < 300 * 1024, picture


def load_hooks():
    """docs/hooks.py, the MkDocs hooks module, loaded from its path (docs/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_a_new_game_joins_the_games_page_with_no_edit_of_the_page():
    """A registered game the page does not place gets its own section from the 'others' marker:
    its name, its rules (the module docstring), its params table and, with no GIF made yet, the
    command that makes it; games the page places by hand are not repeated."""
    from fasttrain import games
    from tests.fasttrain.kernels.test_user_game import FORAGE

    hooks = load_hooks()
    page = type("Page", (), {"file": type("File", (), {"src_uri": "games.md"})()})()
    markdown = "## Snake\n\n<!-- game: snake -->\n\n## More\n\n<!-- games: others -->\n"
    games.register(FORAGE, overwrite=True)
    try:
        out = hooks.on_page_markdown(markdown, page, None, None)
    finally:
        games._REGISTRY.pop(FORAGE.name, None)
    assert "### test_forage" in out
    assert "python docs/make_assets.py --only test_forage" in out
    assert "| `rule` |" in out  # its params table (ForageParams.rule)
    assert "### snake" not in out and out.count("assets/games/snake.gif") == 1
    for name in games.names():  # every built-in game once
        assert out.count(f"assets/games/{name}.gif") == 1, name
    with pytest.raises(Exception, match="others"):
        hooks.on_page_markdown("<!-- game: snake -->\n", page, None, None)

"""MkDocs hooks: the parts of the docs that the code already says, generated at build time.

``<!-- game: NAME -->`` on a page becomes the game's GIF (docs/assets/games/NAME.gif, made by
docs/make_assets.py), its rules (the game module's docstring, which is its spec) and a table of
its parameters (the params dataclass: name, default and the docstring under each field).
``<!-- games: others -->`` becomes a section, headed by the game's name, for every registered
game the page does not place with its own marker: a new game joins the Games page with no edit.
``<!-- config: SECTION -->`` becomes the table of a config section (``run``, ``model``, ``log``
or a learner's: its dataclass's fields, defaults and docstrings). The Algorithms page must hold a
config marker per registered learner: a new learner without its section fails the build.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

DOCS = Path(__file__).resolve().parent  # the docs folder: this file sits in it
# a marker is a line of its own (so prose can quote one in backticks)
MARKER = re.compile(r"^<!-- game: ([\w-]+) -->$", re.M)
OTHERS = re.compile(r"^<!-- games: others -->$", re.M)
CONFIG = re.compile(r"^<!-- config: (\w+) -->$", re.M)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "games.md":
        if not OTHERS.search(markdown):
            raise PluginError("docs/games.md has no <!-- games: others --> marker")
        markdown = OTHERS.sub(lambda m: other_games(set(MARKER.findall(markdown))), markdown)
    if page.file.src_uri == "algorithms.md":
        from fasttrain.learners import LEARNERS

        missing = sorted(set(LEARNERS) - set(CONFIG.findall(markdown)))
        if missing:
            raise PluginError(f"docs/algorithms.md has no section for {', '.join(missing)}")
    markdown = CONFIG.sub(lambda m: config_table(m.group(1)), markdown)
    return MARKER.sub(lambda m: game_section(m.group(1)), markdown)


def fields_table(cls, prefix: str) -> list[str]:
    """A Markdown table of a dataclass's fields: ``prefix.name``, default and docstring."""
    from fasttrain.config.file import field_docs

    docs, defaults = field_docs(cls), cls()
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for field in dataclasses.fields(cls):
        text = " ".join(docs.get(field.name, "").split()).replace("|", "\\|")
        value = getattr(defaults, field.name)
        lines.append(f"| `{prefix}{field.name}` | `{value!r}` | {text} |")
    return lines


def config_table(section: str) -> str:
    """The table of config section ``section`` (``[run]``, ``[model]``, ``[ppo]`` ...)."""
    from fasttrain.config.resolve import SECTIONS

    if section not in SECTIONS:
        raise PluginError(
            f"<!-- config: {section} -->: no such section; valid: {', '.join(SECTIONS)}"
        )
    return "\n".join(fields_table(SECTIONS[section], f"{section}."))


def other_games(placed: set[str]) -> str:
    """A section (``### name`` and its game section) per registered game not in ``placed``."""
    from fasttrain import games

    others = [name for name in games.names() if name not in placed]
    return "\n\n".join(f"### {name}\n\n{game_section(name)}" for name in others)


def game_section(name: str) -> str:
    """The GIF, the rules and the parameters of game ``name``, as Markdown."""
    from fasttrain import games

    try:
        spec = games.get(name)
    except ValueError as exc:
        raise PluginError(f"<!-- game: {name} -->: {exc}") from None
    params = spec.params_cls()
    doc = importlib.import_module(spec.params_cls.__module__).__doc__ or ""
    shape = " x ".join(str(s) for s in spec.obs_shape(params))
    gif = DOCS / "assets" / "games" / f"{name}.gif"
    picture = (
        f"![{name}](assets/games/{name}.gif){{ width=256 }}"
        if gif.exists()
        else f"(No picture yet: `python docs/make_assets.py --only {name}` makes it.)"
    )
    lines = [
        picture,
        "",
        f"`fasttrain.make({name!r})`: observations {spec.obs_dtype.__name__} ({shape}), "
        f"{spec.actions(params)} actions, {spec.agents(params)} agent"
        f"{'s' if spec.agents(params) > 1 else ''} per environment (default params).",
        "",
        rules(doc),
        "",
        f"Parameters (`[game.{name}]` in a config file, `--set game.{name}.KEY=VALUE`):",
        "",
        *fields_table(spec.params_cls, ""),
    ]
    return "\n".join(lines)


LABEL = re.compile(r"^([A-Z][\w ,'-]{0,40}):(\s)")  # "Observation: ...", "Dynamics, in order: ..."


def rules(doc: str) -> str:
    """A game module's docstring as Markdown: each ``Label: text`` entry (or paragraph) one
    paragraph with its label in bold, the lines laid out as a table (deeper indented, or
    ``channel N``) kept in a text block, ````code```` as ``code``."""
    entries: list[list[str]] = []
    for paragraph in re.split(r"\n\s*\n", doc.strip()):
        for k, line in enumerate(paragraph.splitlines()):
            if k == 0 or (line and not line[0].isspace() and LABEL.match(line)):
                entries.append([line])
            else:
                entries[-1].append(line)
    out = []
    for entry in entries:
        text, table = [entry[0]], []
        for line in entry[1:]:
            body = line[4:] if line.startswith("    ") else line.lstrip()
            if body.startswith((" ", "channel ")):  # laid out by hand: keep it as it is
                table.append(body)
                continue
            if table:
                out.append(_paragraph(text))
                out.append("```text\n" + "\n".join(table) + "\n```")
                text, table = [], []
            text.append(body)
        out.append(_paragraph(text))
        if table:
            out.append("```text\n" + "\n".join(table) + "\n```")
    return "\n\n".join(part for part in out if part)


def _paragraph(lines: list[str]) -> str:
    text = " ".join(line.strip() for line in lines if line.strip())
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return LABEL.sub(r"**\1:**\2", text)

"""The config as a file: field docs (the docstring under each dataclass field, CleanRL style)
and ``to_toml``, which writes ``config.toml`` and a run's resolved config.

``python -m fasttrain.config.file`` prints the repository's ``config.toml``: every key with its
default and a comment (tests/fasttrain/config/test_resolve.py checks the file is current).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import sys
import textwrap

from fasttrain import games
from fasttrain.config.curriculum import Stage
from fasttrain.config.resolve import SECTIONS, Config, ModelConfig, build
from fasttrain.learners import LEARNERS


@functools.cache
def _class_nodes(module: str) -> dict[str, ast.ClassDef]:
    """The top-level class definitions of a module's source, by name (each module parsed once:
    ``inspect.getsource`` of a class parses its whole module at every call)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (CleanRL style), by field name; a field a
    subclass declares again takes the subclass's (the MinAtar ports over ``MinAtarParams``)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls) -> dict[str, str]:
    """The field docstrings written in ``cls``'s own body."""
    node = _class_nodes(cls.__module__).get(cls.__qualname__)
    if node is None:  # not a top-level class of its module's source: parse the class alone
        try:
            node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        except (OSError, TypeError, SyntaxError):
            return {}
    body = node.body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = after.value.value.strip()
    return docs


# ------------------------------------------------------------------------------- writing


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):  # an inline table: a stage's params
        items = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    return str(value)


def _table(lines: list, name: str, values: dict, docs: dict, array: bool = False):
    lines += ["", f"[[{name}]]" if array else f"[{name}]"]
    width = max((len(f"{k} = {_toml_value(v)}") for k, v in values.items()), default=0)
    for key, value in values.items():
        text = f"{key} = {_toml_value(value)}"
        doc = " ".join(docs.get(key, "").split())  # a comment stays on its line
        lines.append(f"{text.ljust(width)}  # {doc}" if doc else text)


def to_toml(config: Config, header: str = "", model: ModelConfig | None = None) -> str:
    """The config as TOML with a comment per key (a run's resolved config, and config.toml).

    ``[model]`` is the chosen game's network (or ``model``); ``[game.<name>.<learner>]`` and
    ``[game.<name>.model]`` hold what differs, on that game, from ``[<learner>]`` and
    ``[model]``: the presets and per-game settings, resolved, so reading the text back gives the
    same settings for every game.
    """
    lines = [header.rstrip()] if header else []
    chosen, algo = config.game.name, config.run.algo
    for name, cls in SECTIONS.items():
        if name in LEARNERS:  # as written: the base every game's settings start from
            section = config.layers.section(name)
        elif name == "model":  # the chosen game's network, unless told otherwise
            section = model or config.model
        else:  # run, game and log as the run uses them
            section = getattr(config, name)
        _table(lines, name, dataclasses.asdict(section), field_docs(cls))
        if name != "game":
            continue
        written_model = dataclasses.asdict(model or config.model)
        for game in games.names():
            params = config.params if game == chosen else config.layers.params(game)
            _table(lines, f"game.{game}", dataclasses.asdict(params), field_docs(type(params)))
            for learner in LEARNERS.values():
                written = dataclasses.asdict(config.layers.section(learner.name))
                used = (
                    config.learner  # with what the command line set after resolution
                    if (game, learner.name) == (chosen, algo)
                    else config.layers.learner(learner.name, game)
                )
                differs = {k: v for k, v in dataclasses.asdict(used).items() if v != written[k]}
                if differs:
                    _table(
                        lines, f"game.{game}.{learner.name}", differs, field_docs(learner.config)
                    )
            used = dataclasses.asdict(config.layers.model(game))
            differs = {k: v for k, v in used.items() if v != written_model[k]}
            if differs:
                _table(lines, f"game.{game}.model", differs, field_docs(ModelConfig))
    docs = field_docs(Stage)
    for stage in config.curriculum:
        values = {k: v for k, v in dataclasses.asdict(stage).items() if v is not None}
        _table(lines, "curriculum.stage", values, docs, array=True)
    if not config.curriculum and header:  # the keys, documented, for config.toml's readers
        lines += ["", CURRICULUM_HELP.rstrip()]
    return "\n".join(lines).lstrip("\n") + "\n"


CONFIG_HEADER = """\
# fasttrain configuration: every key with its default. The code holds the same defaults
# (tests/fasttrain/config/test_resolve.py checks it), so no file is needed to run.
# Use: fasttrain run --config config.toml --set ppo.learning_rate=3e-4 --set game.snake.height=8
# [game.<name>] sets that game's parameters (shown with the values the game trains with: its own
# defaults and its preset); [game.<name>.ppo], [game.<name>.dqn] and [game.<name>.model]
# override [ppo], [dqn] and [model] for that game. They show each game's base preset; a value
# written here is used on every machine, over run.preset's fp32 and cuda variants."""


CURRICULUM_HELP = """\
# [[curriculum.stage]]: none by default. Ordered stages of game-param overrides, changed between
# iterations without recompiling (see fasttrain/config/curriculum.py), one table per stage, e.g.
#   [[curriculum.stage]]
#   params = { num_bots = 2 }        # on top of [game.<name>]; no param that sets buffer shapes
#   promote_at = 3.0                 # the mean that promotes (every stage but the last)
#   promote_metric = "charts/score"  # or charts/episodic_return, charts/episodic_length
#   promote_episodes = 100           # episodes the mean covers (at least)
#   min_steps = 0                    # agent steps spent in the stage before a promotion
#   [[curriculum.stage]]
#   params = { num_bots = 8, bot_policy = "greedy" }"""


def config_file() -> str:
    """The repository's ``config.toml``: every key with its built-in default (``[model]`` the
    dataclass's own, each game's network in its ``[game.<name>.model]``), the same on every
    machine: ``run.preset = "auto"`` and each game's base preset."""
    config = build([("config.toml", {"run": {"preset": "base"}})])
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, preset="auto"))
    return to_toml(config, CONFIG_HEADER, model=ModelConfig())


if __name__ == "__main__":  # regenerate config.toml: python -m fasttrain.config.file > config.toml
    print(config_file(), end="")

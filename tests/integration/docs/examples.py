"""The examples of README.md and docs/: every block found with the file and line it starts on, and
run as a reader would run it, at a tiny size.

A page is a program: its ``python`` blocks and the ``fasttrain`` lines of its ``bash`` blocks run
in order in one working folder (a later block can use a run an earlier one made), the Python
blocks in one namespace. A ``fasttrain`` line runs through the real CLI, made tiny (``tiny``);
``fasttrain bench``, ``--nproc`` and ``torchrun`` lines are parsed by the real CLI instead, with
the config a ``run`` would train with built from its ``--config`` and ``--set``. A ``toml`` block
must load as a config file, or as a sweep file where it has a ``[sweep]`` table. Whatever fails
raises ``ExampleFailed`` naming the block's file and line.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import traceback
from dataclasses import dataclass
from pathlib import Path

from tests.cli import ROOT

FENCE = re.compile(r"^(\s*)(```+)\s*([\w-]*)\s*$")


class ExampleFailed(AssertionError):
    """An example of the docs failed; the message starts with its ``file:line``."""


@dataclass
class Block:
    """A fenced code block: its language, text (dedented to its fence) and origin."""

    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str

    @property
    def origin(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a Markdown file, in order (a fence may be indented, in a list)."""
    found, lines = [], path.read_text().splitlines()
    name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    k = 0
    while k < len(lines):
        match = FENCE.match(lines[k])
        if not match:
            k += 1
            continue
        indent, fence, lang = match.groups()
        body, j = [], k + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        found.append(Block(name, k + 1, lang, "\n".join(body) + "\n"))
        k = j + 1
    return found


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def command_lines(block: Block) -> list[list[str]]:
    """The ``fasttrain`` commands of a bash block as argument lists without ``fasttrain``
    (``torchrun ... -m fasttrain ARGS`` gives ``["torchrun", *ARGS]``); lines continued with a
    backslash are joined, comments dropped, other commands (pip, pytest) left out."""
    out, pending = [], ""
    for line in block.text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        for part in re.split(r"\s*&&\s*", line):
            words = shlex.split(part, comments=True)
            if words[:1] == ["fasttrain"]:
                out.append(words[1:])
            elif words[:1] == ["torchrun"] and "fasttrain" in words:
                out.append(["torchrun", *words[words.index("fasttrain") + 1 :]])
    return out


# ------------------------------------------------------------------------------- commands

TINY_RUN_STEPS = 256  # a run's --steps where it gives none: an iteration or two
STEPS_DIVISOR = 10_000  # a run's --steps shrink by this much (ordered as before: resumes go on)
MAX_NUM_ENVS, MAX_EPISODES, MAX_PLAY_STEPS = 8, 16, 50
MAX_TRIALS, TRIAL_SECONDS = 3, 2


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args[:-1] else None


def _set_option(args: list[str], name: str, value) -> list[str]:
    if name in args[:-1]:
        k = args.index(name)
        return [*args[: k + 1], str(value), *args[k + 2 :]]
    return [*args, name, str(value)]


def learner(args: list[str]) -> str:
    """The learner a ``fasttrain run`` line trains: --algo, run.algo of --set or the --config
    file, else the game's preset's (its smoke settings go to that learner's section: another
    learner's would be refused)."""
    from fasttrain.config import resolve as cfg
    from fasttrain.config.presets import learner_of

    sets = [args[k + 1] for k, word in enumerate(args[:-1]) if word == "--set"]
    algo = _option(args, "--algo") or cfg.parse_set(sets).get("run", {}).get("algo")
    if algo is None and _option(args, "--config"):
        algo = cfg.load_toml(_option(args, "--config")).get("run", {}).get("algo")
    return algo or learner_of(_option(args, "--game") or "snake")


def tiny(args: list[str]) -> tuple[str, list[str]]:
    """``("run", args)`` to run a command at a tiny size, or ``("parse", args)`` where only its
    options are checked (benchmarks, several processes, torchrun)."""
    from fasttrain.learners import LEARNERS

    command = args[0] if args else ""
    if command in ("bench", "torchrun") or int(_option(args, "--nproc") or 1) > 1:
        return "parse", args[1:] if command == "torchrun" else args
    if command == "run":
        resume = _option(args, "--resume")
        steps = _option(args, "--steps")
        if steps is not None:
            args = _set_option(args, "--steps", max(1, int(steps) // STEPS_DIVISOR))
        elif resume is None:
            args = [*args, "--steps", str(TINY_RUN_STEPS)]
        if resume is not None:  # the run's own config: it was made tiny when it started
            return "run", args
        envs = _option(args, "--num-envs")
        if envs is not None:
            args = _set_option(args, "--num-envs", min(int(envs), MAX_NUM_ENVS))
        # the learner's smoke settings (a seconds-long run) below the line's own --set items
        algo = learner(args)
        settings = dict(LEARNERS[algo].smoke)
        if re.search(r"model\.core=(lstm|gru)", " ".join(args)):
            # a recurrent core replays whole sequences: ones that fit the short rollout
            settings["bptt_horizon"] = settings.get("num_steps", 8) // 2
        smoke = [["--set", f"{algo}.{k}={json.dumps(v)}"] for k, v in settings.items()]
        return "run", [args[0], *sum(smoke, []), *args[1:], "--set", "log.curves=false"]
    if command == "eval":
        episodes = int(_option(args, "--episodes") or MAX_EPISODES)
        return "run", _set_option(args, "--episodes", min(episodes, MAX_EPISODES))
    if command == "play":
        steps = int(_option(args, "--steps") or MAX_PLAY_STEPS)
        return "run", _set_option(args, "--steps", min(steps, MAX_PLAY_STEPS))
    if command == "sweep":
        trials = int(_option(args, "--trials") or MAX_TRIALS)
        args = _set_option(args, "--trials", min(trials, MAX_TRIALS))
        return "run", [*args, "--set", f"sweep.budget_s={TRIAL_SECONDS}"]
    return "run", args


def parse(args: list[str]) -> None:
    """Check ``fasttrain ARGS`` with the real CLI without running it: the command's options
    (click), and for ``run`` and ``sweep`` the config they would use."""
    import click

    from fasttrain.cli import main
    from fasttrain.run.command import RunRequest, run_config

    command, rest = main, list(args)
    while isinstance(command, click.Group):
        if not rest or command.get_command(None, rest[0]) is None:
            raise click.UsageError(f"no such command {rest[:1]}")
        name, command, rest = rest[0], command.get_command(None, rest[0]), rest[1:]
    ctx = command.make_context(name, rest)
    p = ctx.params
    if name == "run" and not p["resume"]:
        run_config(RunRequest(**p))
    if name == "sweep":
        from fasttrain import sweepfile
        from fasttrain.config import resolve as cfg

        sweepfile.from_layers(cfg.user_layers(p["config_file"], p["sets"]), p["trials"], p["seed"])


def invoke(args: list[str]) -> str:
    """``fasttrain ARGS`` in this process, as the console script runs it; its output, or
    AssertionError with the output and the exception where it failed."""
    from click.testing import CliRunner

    from fasttrain.cli import main

    result = CliRunner().invoke(main, args)
    if result.exit_code != 0:
        detail = ""  # a traceback where the command raised, not where it exited with a message
        if result.exc_info and not isinstance(result.exception, SystemExit):
            detail = "\n" + "".join(traceback.format_exception(*result.exc_info))[-3000:]
        raise AssertionError(f"exit {result.exit_code}:\n{result.output[-2000:]}{detail}")
    return result.output


def check_toml(block: Block) -> None:
    """A toml block loads as a config file (a sweep file where it has a [sweep] table)."""
    from fasttrain import sweepfile
    from fasttrain.config import resolve as cfg

    if block.text.lstrip().startswith(("--8<--", "# fragment")):
        return
    data = cfg.tomllib.loads(block.text)
    if block.text.lstrip().startswith(
        "# from:"
    ):  # a preset file, fasttrain/config/presets/NAME.toml
        check_preset(block.text, next(iter(data.get("game", {"": None}))))
    elif "sweep" in data:
        sweepfile.from_layers([("toml block", data)])
    else:
        cfg.from_dict(data, "toml block")


def check_preset(text: str, game: str) -> None:
    """A toml block that is a preset file loads as one: its shape (presets.read), then its
    tables and its variants' ([fp32], [cuda]) as config layers."""
    import tempfile

    from fasttrain.config import presets
    from fasttrain.config import resolve as cfg

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{game}.toml"
        path.write_text(text)
        data = presets.read(path)
    cfg.check_layer({k: v for k, v in data.items() if k not in presets.VARIANTS}, "preset block")
    for variant in presets.VARIANTS:
        if variant in data:
            cfg.check_layer(data[variant], f"preset block [{variant}]")


# ------------------------------------------------------------------------------- a page


def run_page(path: Path, root: Path = ROOT, log=None) -> list[str]:
    """Run every example of ``path`` in order in the current folder (see the module
    docstring); returns what ran (``origin: what``). The first failure raises
    ``ExampleFailed`` with the block's origin."""
    namespace: dict = {"__name__": "__docs__"}
    done = []
    for block in blocks(path, root):
        try:
            if block.lang == "python":
                code = compile(block.text, block.origin, "exec")
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(code, namespace)  # noqa: S102 - the docs' own examples
                done.append(f"{block.origin}: python")
            elif block.lang == "toml":
                check_toml(block)
                done.append(f"{block.origin}: toml")
            elif block.lang == "bash":
                for args in command_lines(block):
                    mode, actual = tiny(args)
                    what = (
                        f"torchrun ... -m fasttrain {shlex.join(args[1:])}"
                        if args[0] == "torchrun"
                        else f"fasttrain {shlex.join(args)}"
                    )
                    try:
                        parse(actual) if mode == "parse" else invoke(actual)
                    except BaseException as exc:
                        raise ExampleFailed(
                            f"{block.origin}: `{what}` failed ({mode} as "
                            f"`fasttrain {shlex.join(actual)}`): {exc}"
                        ) from None
                    done.append(f"{block.origin}: {mode} {what}")
        except ExampleFailed:
            raise
        except BaseException as exc:
            detail = "".join(traceback.format_exception(exc))[-3000:]
            raise ExampleFailed(f"{block.origin}: {block.lang} block failed:\n{detail}") from None
    if log is not None:
        for line in done:
            log(line)
    return done

"""Tuned per-game settings, as data: one TOML file per game beside this module
(``fasttrain/config/presets/<game>.toml``), in ``config.toml``'s layer format.

A preset file is a layer for its own game only:

- ``[run] algo``: the learner the game trains with where no layer names one (``run.algo``,
  ``--algo``);
- ``[game.<name>]``: the game parameters it trains with where they differ from the game's own
  defaults (``"params"`` below);
- ``[game.<name>.<learner>]`` and ``[game.<name>.model]``: its learner and network settings;
- ``[cuda.game.<name>...]``: the same tables again, laid over those above where the run's
  device is cuda (a preset that depends on the device).

Its first line says which measurement it comes from; the measurements are in
docs/performance.md. The values sit just above the learners' dataclass defaults; a user's
``--config`` file and ``--set`` beat them (see ``fasttrain.config.resolve``). The files are read
with ``tomllib``: nothing in them runs.
"""

from __future__ import annotations

from pathlib import Path

from fasttrain.config.read import tomllib

PRESET_DIR = Path(__file__).parent


def read(path: Path) -> dict:
    """One preset file, its shape checked: ``[run] algo``, its own game's tables and an
    optional ``[cuda]`` table of the same game's tables. Keys and values are checked as a
    config layer by ``fasttrain.config.resolve.check_layer``
    (tests/fasttrain/config/test_presets.py)."""
    game = path.stem
    with open(path, "rb") as f:
        data = tomllib.load(f)
    allowed = {"run": {"algo"}, "game": {game}, "cuda": {"game"}}
    for section, table in data.items():
        keys = set(table) if isinstance(table, dict) else None
        if section not in allowed or keys is None or not keys <= allowed[section]:
            raise ValueError(
                f"{path}: a preset holds [run] algo, [game.{game}...] and [cuda.game.{game}...]"
                f" tables only, not [{section}]"
            )
    if set(data.get("cuda", {}).get("game", {})) - {game}:
        raise ValueError(f"{path}: [cuda] holds [cuda.game.{game}...] tables only")
    return data


def _sections(data: dict, game: str) -> dict[str, dict]:
    """``{"params": {...}, "ppo": {...}, "model": {...}}`` of a preset's ``[game.<name>]``."""
    table = data.get("game", {}).get(game, {})
    sections = {k: dict(v) for k, v in table.items() if isinstance(v, dict)}
    params = {k: v for k, v in table.items() if not isinstance(v, dict)}
    return {"params": params, **sections} if params else sections


def load(directory: Path = PRESET_DIR) -> dict[str, dict]:
    """Every preset file in ``directory``, by game name."""
    return {path.stem: read(path) for path in sorted(directory.glob("*.toml"))}


PRESETS = load()
# game -> {"params" | learner | "model": {key: value}}
GAME_DEFAULTS: dict[str, dict[str, dict]] = {
    game: _sections(data, game) for game, data in PRESETS.items()
}
# the learner a game trains with where no layer names one (run.algo, --algo)
GAME_ALGOS: dict[str, str] = {
    game: data["run"]["algo"] for game, data in PRESETS.items() if "algo" in data.get("run", {})
}
# presets for a run on a GPU, laid over the game's own where the run's device is cuda. None is
# set yet: each needs its time to score measured on a GPU (docs/performance.md, GPUs)
GPU_DEFAULTS: dict[str, dict[str, dict]] = {
    game: _sections(data["cuda"], game) for game, data in PRESETS.items() if "cuda" in data
}


def learner_of(game: str) -> str:
    """The learner ``game`` trains with where no layer names one: its preset's, else PPO."""
    return GAME_ALGOS.get(game, "ppo")


def default_learners() -> str:
    """Each game's own learner in words, for ``--algo``'s help and the docs: ``"pqn for
    minatar-asterix and minatar-seaquest, ppo for the others"``."""
    by_learner: dict[str, list[str]] = {}
    for game, algo in sorted(GAME_ALGOS.items()):
        by_learner.setdefault(algo, []).append(game)
    common = max(by_learner, key=lambda algo: len(by_learner[algo]), default="ppo")
    parts = [
        f"{algo} for {' and '.join(games) if len(games) < 3 else ', '.join(games)}"
        for algo, games in by_learner.items()
        if algo != common
    ]
    return ", ".join([*parts, f"{common} for the others"])


def preset(game: str, learner: str, device: str = "cpu") -> dict:
    """The tuned settings of ``learner`` (or ``"model"``, or ``"params"``: the game's own
    parameters) on ``game``, with the GPU preset over them on ``device`` cuda; empty when
    there are none."""
    values = GAME_DEFAULTS.get(game, {}).get(learner, {})
    if device == "cuda":
        values = {**values, **GPU_DEFAULTS.get(game, {}).get(learner, {})}
    return values


def preset_source(game: str, learner: str, key: str, device: str = "cpu") -> str:
    """``"snake preset"``, or ``"snake gpu preset"`` for a value the GPU preset sets."""
    gpu = device == "cuda" and key in GPU_DEFAULTS.get(game, {}).get(learner, {})
    return f"{game} gpu preset" if gpu else f"{game} preset"

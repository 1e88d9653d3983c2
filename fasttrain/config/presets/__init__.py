"""Tuned per-game settings, as data: one TOML file per game beside this module
(``fasttrain/config/presets/<game>.toml``), in ``config.toml``'s layer format.

A preset file is a layer for its own game only:

- ``[run] algo``: the learner the game trains with where no layer names one (``run.algo``,
  ``--algo``);
- ``[game.<name>]``: the game parameters it trains with where they differ from the game's own
  defaults (``"params"`` below);
- ``[game.<name>.<learner>]`` and ``[game.<name>.model]``: its learner and network settings
  (the ``base`` variant);
- ``[<variant>.game.<name>...]``: the same tables again, laid over those above where the run's
  preset variant (``run.preset``) is ``<variant>``: ``fp32`` on a CPU whose matrix units do not
  compute bf16 natively (AVX2, AVX-512 without BF16, NEON), ``cuda`` on a GPU. A game has a
  variant only where measurement found the machine classes differ.

Its first line says which measurement it comes from; the measurements are in
docs/performance.md. The values sit just above the learners' dataclass defaults; a user's
``--config`` file and ``--set`` beat them (see ``fasttrain.config.resolve``). The files are read
with ``tomllib``: nothing in them runs.
"""

from __future__ import annotations

from pathlib import Path

from fasttrain.config.choices import PRESET_VARIANTS
from fasttrain.config.read import tomllib

PRESET_DIR = Path(__file__).parent
# the variants a preset file may lay over its base tables ([fp32.game.<name>...], [cuda...])
VARIANTS = tuple(v for v in PRESET_VARIANTS if v not in ("auto", "base"))


def read(path: Path) -> dict:
    """One preset file, its shape checked: ``[run] algo``, its own game's tables and optional
    variant tables (``VARIANTS``: ``[fp32]``, ``[cuda]``) of the same game's tables. Keys and
    values are checked as a config layer by ``fasttrain.config.resolve.check_layer``
    (tests/fasttrain/config/test_presets.py)."""
    game = path.stem
    with open(path, "rb") as f:
        data = tomllib.load(f)
    allowed = {"run": {"algo"}, "game": {game}, **{v: {"game"} for v in VARIANTS}}
    variants = " and ".join(f"[{v}.game.{game}...]" for v in VARIANTS)
    for section, table in data.items():
        keys = set(table) if isinstance(table, dict) else None
        if section not in allowed or keys is None or not keys <= allowed[section]:
            raise ValueError(
                f"{path}: a preset holds [run] algo, [game.{game}...], {variants}"
                f" tables only, not [{section}]"
            )
    for variant in VARIANTS:
        if set(data.get(variant, {}).get("game", {})) - {game}:
            raise ValueError(f"{path}: [{variant}] holds [{variant}.game.{game}...] tables only")
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
# variant -> game -> section -> values laid over the game's own where the run's preset variant
# (run.preset) is that one. No cuda variant is set yet: each needs its time to score measured on
# a GPU (docs/performance.md, GPUs)
VARIANT_DEFAULTS: dict[str, dict[str, dict[str, dict]]] = {
    variant: {
        game: _sections(data[variant], game) for game, data in PRESETS.items() if variant in data
    }
    for variant in VARIANTS
}
GPU_DEFAULTS = VARIANT_DEFAULTS["cuda"]


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


def variant_values(game: str, learner: str, variant: str) -> dict:
    """What ``variant``'s tables set for ``learner`` (or ``"model"``, ``"params"``) on ``game``
    over its base preset; empty for ``base`` and where the game has no such table."""
    return VARIANT_DEFAULTS.get(variant, {}).get(game, {}).get(learner, {})


def has_variant(game: str, variant: str) -> bool:
    """Whether ``game``'s preset file has tables for ``variant``."""
    return any(VARIANT_DEFAULTS.get(variant, {}).get(game, {}).values())


def preset(game: str, learner: str, variant: str = "base") -> dict:
    """The tuned settings of ``learner`` (or ``"model"``, or ``"params"``: the game's own
    parameters) on ``game``, with ``variant``'s tables (``run.preset``: ``fp32``, ``cuda``)
    over them; empty when there are none."""
    values = GAME_DEFAULTS.get(game, {}).get(learner, {})
    return {**values, **variant_values(game, learner, variant)}


def preset_source(game: str, learner: str, key: str, variant: str = "base") -> str:
    """``"snake preset"``, or ``"snake fp32 preset"`` (``"snake gpu preset"``) for a value the
    variant's tables set."""
    if key not in variant_values(game, learner, variant):
        return f"{game} preset"
    return f"{game} {'gpu' if variant == 'cuda' else variant} preset"

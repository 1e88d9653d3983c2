"""A run's numbers: the episode means, the metrics.csv row and the console line.

The row is what every sink writes (``metrics.csv``, TensorBoard, W&B) and what ``on_row``
callbacks see: ``global_step``, ``time_s``, ``sps``, the episode means (``charts/...``, CleanRL's
names), the learning rate, the curriculum stage where there is one, the learner's losses
(``losses/...``) and where the time went (``time/...``, fractions of the row's wall time).
"""

from __future__ import annotations

import math

from fasttrain.learners import distributed

NO_EPISODE = {"return": math.nan, "length": math.nan, "score": math.nan}
STAGE_COLUMN = "curriculum/stage"  # 1-based stage the row's last iteration played in
# short names of the columns every learner shares, in the console line; a learner adds its own
# (``Learner.short_names``) and any other column prints its last path component
SHORT = {"losses/skipped_updates": "skipped"}


def combine(batches: list[dict]) -> dict:
    """Episode means over ``env.stats()`` batches, weighted by their episode counts (one batch
    as it is, so a row of one batch is exactly what the env reported)."""
    if len(batches) == 1:
        return {k: batches[0][k] for k in NO_EPISODE}
    count = sum(b["episodes"] for b in batches)
    return {k: sum(b[k] * b["episodes"] for b in batches) / count for k in NO_EPISODE}


class Episodes:
    """The episode statistics of a run: ``env.stats()`` batches read since the last row (over
    every rank's episodes), and the means the last row showed, which a row without a finished
    episode shows again. Both go into checkpoints, so a resumed run writes the same rows."""

    def __init__(self, trainer, ranks, state: dict | None = None):
        self.trainer, self.ranks = trainer, ranks
        state = state or {}
        self.means = dict(state.get("episode", NO_EPISODE))
        self.batches = list(state.get("episode_batches", []))

    def read(self) -> dict:
        """This iteration's stats (clearing the env's sums); kept for the next row."""
        trainer = self.trainer
        stats = distributed.episode_stats(trainer.env.stats(), self.ranks, trainer.device)
        if stats:
            self.batches.append(stats)
        return stats

    def take(self) -> dict:
        """The means for a row: over the batches read since the last row, or the last ones."""
        if self.batches:
            self.means = combine(self.batches)
            self.batches.clear()
        return self.means


def row(trainer, time_s: float, sps: float, episode: dict, losses: dict, split: dict, stage=None):
    """One metrics.csv row (see the module docstring)."""
    return {
        "global_step": trainer.global_step,
        "time_s": round(time_s, 3),
        "sps": round(sps, 1),
        "charts/episodic_return": episode["return"],
        "charts/episodic_length": episode["length"],
        "charts/score": episode["score"],
        "charts/learning_rate": trainer.learning_rate,
        **({} if stage is None else {STAGE_COLUMN: stage + 1}),
        **losses,
        **{f"time/{k}": round(v, 4) for k, v in split.items()},
    }


def duration(seconds: float) -> str:
    """``seconds`` as ``1h02m``, ``3m07s`` or ``42s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def time_left(left: int, done: int, seconds: float) -> str:
    """The time ``left`` steps take at ``done`` steps per ``seconds``: ``3m07s``; ``0s`` with
    none left, ``--`` before anything was measured."""
    if left <= 0:
        return "0s"
    if done <= 0 or seconds <= 0:
        return "--"
    return duration(left * seconds / done)


LINE_WIDTH = 120  # the default log line fits a terminal this wide; ``log.wide`` prints it all


def si(value: float) -> str:
    """``value`` in three significant digits and a suffix: ``987``, ``98.3k``, ``1.25M``,
    ``50.0M``, ``4.50B``."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size * 0.9995:
            scaled = value / size
            digits = 2 if abs(scaled) < 9.995 else 1 if abs(scaled) < 99.95 else 0
            return f"{scaled:.{digits}f}{suffix}"
    return f"{value:.0f}"


def short(value: float) -> str:
    """A loss in two significant digits, exponent unpadded: ``0.13``, ``-3e-4``, ``1.4e+3``."""
    text = f"{value:.2g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def console_line(
    step: int,
    sps: float,
    unit: str,
    eta_text: str,
    at: str,
    episode: dict,
    losses,
    split,
    names,
    wide: bool = False,
) -> str:
    """The log line of an iteration boundary: steps, speed, time left, the episode means and
    the losses by their short names (``names``), in at most ``LINE_WIDTH`` columns: the losses
    that do not fit are left out (metrics.csv has them all). ``wide``: every loss in four
    significant digits and where the time went (env / forward / learn / other)."""
    names = {**SHORT, **names}
    if wide:
        return (
            f"step {step:>11,} | {sps:>9,.0f} {unit} | ETA {eta_text:>6} | {at}"
            f"return {episode['return']:7.2f} | score {episode['score']:6.2f} | "
            f"len {episode['length']:6.1f} | "
            + " ".join(f"{names.get(k, k.split('/')[-1])} {v:.4g}" for k, v in losses.items())
            + " | "
            + " ".join(f"{k} {v:.0%}" for k, v in split.items())
        )
    line = (
        f"step {si(step):>6} | {si(sps):>6} {unit} | ETA {eta_text:>6} | {at}"
        f"return {episode['return']:7.2f} | score {episode['score']:6.2f} | "
        f"len {episode['length']:6.1f} |"
    )
    skipped = losses.get("losses/skipped_updates", 0)
    items = [f"skipped {skipped:.0f}"] if skipped else []  # first: a warning that always fits
    items += [
        f"{names.get(k, k.split('/')[-1])} {short(v)}"
        for k, v in losses.items()
        if k != "losses/skipped_updates"
    ]
    for item in items:
        if len(line) + 1 + len(item) > LINE_WIDTH:
            break
        line += " " + item
    return line


def wrap(pieces: list[str], separator: str, width: int = LINE_WIDTH, indent: str = "  ") -> str:
    """``pieces`` joined by ``separator`` into lines of at most ``width`` columns (a piece
    longer than that stays whole on its own line), later lines indented by ``indent``."""
    lines, line = [], ""
    for piece in pieces:
        candidate = line + separator + piece if line else piece
        if line and len(candidate + separator.rstrip()) > width:  # room for the separator
            lines.append(line + separator.rstrip())
            line = indent + piece
        else:
            line = candidate
    lines.append(line)
    return "\n".join(lines)

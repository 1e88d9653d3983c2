"""Where a run's metrics rows go: ``metrics.csv`` (``CsvSink``, always), and the dashboards
people already use, TensorBoard and Weights & Biases.

The dashboards are optional extras and both are off by default (``log.tensorboard``,
``log.wandb``). A run that asks for one whose package is missing fails before any work with one
line naming the extra (``check``). Each sink gets exactly the rows metrics.csv gets, with
``global_step`` as the step, so the dashboards and the CSV never disagree:

- TensorBoard: ``RUN_DIR/tensorboard/`` through ``torch.utils.tensorboard`` (extra
  ``tensorboard``); a resumed run appends to the same folder, and its steps continue.
- W&B: ``log.wandb = "offline"`` writes ``RUN_DIR/wandb/offline-run-*`` (``wandb sync`` uploads
  it later), ``"online"`` streams to the project ``log.wandb_project`` under the name
  ``log.wandb_name`` (default: the run directory's name). The W&B run id is kept in
  ``RUN_DIR/wandb_id``, so a resumed run continues the same W&B run.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import re
import secrets
from pathlib import Path

from fasttrain.errors import ConfigError, RunError
from fasttrain.run.rundir import check_regular, open_text, write_atomic

WANDB_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"  # W&B's own run ids
WANDB_ID = re.compile(r"[a-z0-9]{1,64}")
# what each sink imports, and the extra that installs it
NEEDS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def wanted(log) -> list[str]:
    """The sinks ``log`` (a LogConfig) turns on, by name."""
    names = ["tensorboard"] if log.tensorboard else []
    return names + (["wandb"] if log.wandb != "off" else [])


def check(log) -> None:
    """Every sink asked for can be imported; else one line naming the extra (before any work)."""
    for name in wanted(log):
        module, extra = NEEDS[name]
        if importlib.util.find_spec(module) is None:
            setting = "log.tensorboard = true" if name == "tensorboard" else "log.wandb"
            raise ConfigError(
                f"{setting} needs the {module} package: pip install 'fasttrain[{extra}]' "
                f"(or turn it off)"
            )


class CsvSink:
    """``metrics.csv``: CleanRL's column names, a row per ``write``, flushed at once. On resume
    the rows past the checkpoint (which the resumed run writes again) and a last row cut short
    are dropped first, and rows keep the file's columns."""

    def __init__(self, path: Path, resume_step: int | None = None):
        self.path = Path(path)
        self.columns = None if resume_step is None else trim_metrics(self.path, resume_step)
        self.file = open_text(self.path, append=bool(self.columns))
        self.writer = None  # made at the first row: its columns follow the learner's losses

    def write(self, row: dict) -> None:
        if self.writer is None:
            columns = self.columns or list(row)
            self.writer = csv.DictWriter(self.file, fieldnames=columns, extrasaction="ignore")
            if self.columns is None:
                self.writer.writeheader()
        try:
            self.writer.writerow(row)
            self.file.flush()
        except OSError as exc:  # a full disk: say so, keep the last checkpoint
            raise RunError(
                f"{exc.strerror.lower()} writing {self.path}; the last checkpoint in "
                f"{self.path.parent} is intact"
            ) from None

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:  # rows that could not be written were reported
            pass


def trim_metrics(path: Path, global_step: int) -> list[str] | None:
    """Drop rows of ``path`` past ``global_step`` (a resume repeats them) and a last row cut
    short (a full disk or a kill mid-write); returns the header (None: no file, or empty)."""
    if not check_regular(path, "read"):
        return None
    text = path.read_text(encoding="utf-8")  # as open_text writes it, on Windows too
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(complete)))
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    kept = [row for row in body if len(row) == len(header) and int(float(row[0])) <= global_step]
    if len(kept) != len(body) or complete != text:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([header, *kept])
        write_atomic(path, out.getvalue())
    return header


def _number(value):
    """A row value as a float for a dashboard, or None for text (NaN stays NaN, as in the CSV)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


class TensorBoard:
    """Scalars of each row at ``global_step`` in ``run_dir/tensorboard``."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        # written out every few seconds and at the end (a flush per row would cost the run)
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"), flush_secs=5)

    def write(self, row: dict) -> None:
        step = int(row["global_step"])
        for key, value in row.items():
            number = _number(value)
            if key != "global_step" and number is not None:
                self.writer.add_scalar(key, number, step)

    def close(self) -> None:
        self.writer.close()


class WandB:
    """Each row logged at ``step=global_step`` to a W&B run (offline or online)."""

    def __init__(self, run_dir: Path, config_dict: dict, log):
        import wandb

        run_dir = Path(run_dir)
        id_path = run_dir / "wandb_id"
        if check_regular(id_path, "read"):
            run_id = id_path.read_text(errors="replace").strip()
            if not WANDB_ID.fullmatch(run_id):  # it names W&B's folders and files
                raise ConfigError(
                    f"{id_path} holds {run_id[:40]!r}, not a W&B run id (1-64 lowercase letters "
                    "and digits); delete the file to log to a new W&B run"
                )
        else:
            run_id = "".join(secrets.choice(WANDB_ALPHABET) for _ in range(8))
            write_atomic(id_path, run_id + "\n")
        self.run = wandb.init(
            project=log.wandb_project,
            name=log.wandb_name or run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=log.wandb,
            config=config_dict,
            # the run's own log lines and progress bar stay as they are on the terminal
            settings=wandb.Settings(console="off", silent=True),
        )

    def write(self, row: dict) -> None:
        numbers = {k: _number(v) for k, v in row.items() if k != "global_step"}
        values = {k: v for k, v in numbers.items() if v is not None}  # NaN: a gap, as in the CSV
        self.run.log(values, step=int(row["global_step"]))

    def close(self) -> None:
        self.run.finish()


def open_sinks(log, run_dir: Path, config_dict: dict) -> list:
    """The sinks ``log`` asks for, opened on ``run_dir`` (``check`` ran before)."""
    sinks = []
    try:
        if log.tensorboard:
            sinks.append(TensorBoard(run_dir))
        if log.wandb != "off":
            sinks.append(WandB(run_dir, config_dict, log))
    except Exception:
        close_sinks(sinks)
        raise
    return sinks


def close_sinks(sinks: list) -> None:
    """Close every sink; one that fails to close does not stop the others."""
    for sink in sinks:
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - a dashboard never costs the run its checkpoint
            pass

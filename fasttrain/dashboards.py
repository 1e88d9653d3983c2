"""Dashboards people already use: TensorBoard and Weights & Biases, fed the metrics.csv rows.

Both are optional extras and both are off by default (``log.tensorboard``, ``log.wandb``). A run
that asks for one whose package is missing fails before any work with one line naming the extra
(``check``). Each sink gets exactly the rows metrics.csv gets, with ``global_step`` as the step,
so the dashboards and the CSV never disagree:

- TensorBoard: ``RUN_DIR/tensorboard/`` through ``torch.utils.tensorboard`` (extra
  ``tensorboard``); a resumed run appends to the same folder, and its steps continue.
- W&B: ``log.wandb = "offline"`` writes ``RUN_DIR/wandb/offline-run-*`` (``wandb sync`` uploads
  it later), ``"online"`` streams to the project ``log.wandb_project`` under the name
  ``log.wandb_name`` (default: the run directory's name). The W&B run id is kept in
  ``RUN_DIR/wandb_id``, so a resumed run continues the same W&B run.
"""

from __future__ import annotations

import importlib.util
import re
import secrets
from pathlib import Path

from fasttrain.errors import ConfigError
from fasttrain.rundir import check_regular, write_atomic

WANDB_MODES = ("off", "offline", "online")
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

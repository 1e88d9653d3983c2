"""fasttrain plot: curves from run directories' metrics.csv, and one-line refusals."""

import math

import numpy as np
import pytest
from click.testing import CliRunner

from fasttrain.cli import main
from fasttrain.errors import ConfigError
from fasttrain.plot import figure, plot_runs, read_run, write_curves

pytest.importorskip("matplotlib")
image = pytest.importorskip("matplotlib.image")


def make_run(folder, game, returns, seconds_per_row=0.5, steps_per_row=1000):
    folder.mkdir(parents=True)
    lines = ["global_step,time_s,sps,charts/episodic_return,charts/score"]
    for i, value in enumerate(returns, start=1):
        half = float(value) / 2
        lines.append(f"{i * steps_per_row},{i * seconds_per_row},2000.0,{value},{half}")
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    (folder / "config.toml").write_text(f'[game]\nname = "{game}"\n')
    return folder


@pytest.fixture
def two_runs(tmp_path):
    a = make_run(tmp_path / "a", "snake", ["nan", 1.0, 2.5, 4.0])
    b = make_run(tmp_path / "b", "snake", [0.5, 0.5, 3.0], seconds_per_row=2.0, steps_per_row=512)
    return a, b


def lines_of(fig):
    return [
        [(line.get_label(), line.get_xdata(), line.get_ydata()) for line in ax.get_lines()]
        for ax in fig.axes
    ]


def test_the_figure_holds_what_each_csv_holds(two_runs):
    runs = [read_run(d) for d in two_runs]
    fig = figure(runs, "steps", ("charts/episodic_return", "charts/score"))
    panels = lines_of(fig)
    assert len(panels) == 2 and [len(p) for p in panels] == [2, 2]
    label, x, y = panels[0][0]
    assert label == "a" and list(x) == [1000, 2000, 3000, 4000]
    assert math.isnan(y[0]) and list(y[1:]) == [1.0, 2.5, 4.0]
    label, x, y = panels[1][1]
    assert label == "b" and list(x) == [512, 1024, 1536] and list(y) == [0.25, 0.25, 1.5]
    assert fig.axes[0].get_title() == "snake"
    timed = lines_of(figure(runs, "time", ("charts/score",)))
    assert list(timed[0][1][1]) == [2.0, 4.0, 6.0]  # run b's time_s
    assert fig.axes[-1].get_xlabel() == "environment steps"


def test_cli_writes_a_png(two_runs, tmp_path):
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(
        main, ["plot", *map(str, two_runs), "--y", "charts/score", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and "2 runs" in result.output
    pixels = image.imread(out)
    assert pixels.shape[:2] == (320, 800)  # one panel: 8 x 3.2 inches at 100 dpi
    assert pixels.std() > 0  # something was drawn
    assert not list(tmp_path.glob(".curves.png*"))  # no temp file left


def test_a_run_writes_its_own_curves(two_runs):
    path = write_curves(two_runs[0])
    assert path == two_runs[0] / "curves.png"
    assert image.imread(path).shape[:2] == (640, 800)  # return and score panels


def test_names_a_user_gave_are_drawn_as_they_are(tmp_path):
    """A run folder, a column and a game name are a user's text: a ``$`` starts no mathtext
    (``run $_$`` ended in a ParseSyntaxException) and a leading ``_`` keeps its legend entry."""
    runs = [make_run(tmp_path / name, "snake $_$", [1.0, 2.0, 3.0]) for name in ("run $_$", "_b")]
    for run in runs:  # one more column, a$_$b
        path = run / "metrics.csv"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0] + ",a$_$b"] + [row + ",7.0" for row in lines[1:]]))
    out = tmp_path / "c.png"
    args = ["plot", *map(str, runs), "--y", "a$_$b", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert image.imread(out).std() > 0
    fig = figure([read_run(run) for run in runs], "steps", ("a$_$b",))
    ax = fig.axes[0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["run $_$", "_b"]
    assert (ax.get_ylabel(), ax.get_title()) == ("a$_$b", "snake $_$")
    assert write_curves(runs[0]) == runs[0] / "curves.png"  # a run's own curves at its end
    assert image.imread(runs[0] / "curves.png").shape[:2] == (640, 800)


@pytest.mark.parametrize(
    "args,words",
    [
        (["{a}", "--y", "charts/nope"], "has no column 'charts/nope'; valid: sps"),
        (["{missing}"], "has no metrics.csv"),
        (["{empty}"], "has no rows yet"),
        (["{a}", "--out", "{missing}/x.png"], "folder"),
        (["{a}", "--x", "wall"], "'wall' is not one of 'steps', 'time'"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(two_runs, tmp_path, args, words):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.csv").write_text("global_step,time_s\n")
    names = {"a": two_runs[0], "missing": tmp_path / "missing", "empty": empty}
    result = CliRunner().invoke(main, ["plot", *[a.format(**names) for a in args]])
    assert result.exit_code != 0
    assert words in result.output
    assert "Traceback" not in result.output


def test_plot_runs_checks_before_drawing(two_runs, tmp_path):
    with pytest.raises(ConfigError, match="x must be one of steps, time"):
        plot_runs(two_runs, tmp_path / "c.png", x="wall")
    assert not (tmp_path / "c.png").exists()
    assert np.isfinite(read_run(two_runs[1]).columns["charts/score"]).all()

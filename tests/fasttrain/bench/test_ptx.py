"""``python -m fasttrain.bench.ptx``: the command checks its arguments before it compiles anything
(``tests/fasttrain/kernels/test_ptx.py`` tests the compile and the report)."""

import pytest

from fasttrain import games
from fasttrain.bench.ptx import main


def test_the_command_rejects_an_unknown_game_in_one_line_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["snake", "snaek"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.strip().splitlines() == [f"unknown game 'snaek'; valid: {', '.join(games.names())}"]


@pytest.mark.parametrize("cc", ["9", "sm_90", "9.0.1", ""])
def test_a_compute_capability_that_is_not_major_dot_minor_is_refused_in_one_line(cc, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["snake", "--cc", cc])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"--cc must be a compute capability such as 9.0, got {cc!r}"
    ]

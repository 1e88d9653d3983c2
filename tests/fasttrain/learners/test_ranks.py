"""Where this process stands, from torchrun's environment variables."""

import pytest

from fasttrain.errors import ConfigError
from fasttrain.learners import ranks

TORCHRUN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def torchrun_env(monkeypatch):
    """Set torchrun's variables (``None``: unset), every one unset first."""
    for key in TORCHRUN:
        monkeypatch.delenv(key, raising=False)

    def put(**values):
        for key, value in values.items():
            if value is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, value)

    return put


def test_one_process_without_torchrun(torchrun_env):
    assert ranks.launched() is ranks.SINGLE
    assert ranks.SINGLE.main and not ranks.SINGLE.enabled
    torchrun_env(WORLD_SIZE="1", RANK="x")  # one process reads no rank
    assert ranks.checked() is ranks.SINGLE


def test_torchruns_variables_give_the_ranks(torchrun_env):
    torchrun_env(WORLD_SIZE="4", RANK="3", LOCAL_RANK="1")
    got = ranks.launched()
    assert got == ranks.Ranks(rank=3, world=4, local_rank=1, local_world=4)
    assert got.enabled and not got.main
    torchrun_env(LOCAL_WORLD_SIZE="2", MASTER_ADDR="node0", MASTER_PORT="29500")
    assert ranks.checked() == ranks.Ranks(rank=3, world=4, local_rank=1, local_world=2)


SUFFIX = ", as torchrun sets it (fasttrain run --nproc N starts torchrun)"


@pytest.mark.parametrize(
    "values, line",
    [
        (
            {"WORLD_SIZE": "abc"},
            "WORLD_SIZE=abc: not a whole number; the number of processes, 1 or more",
        ),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0: below 1; the number of processes, 1 or more"),
        ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK=x: not a whole number; 0 to 1"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2: above 1; 0 to 1"),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1: below 0; 0 to 1"),
        (
            {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"},
            "LOCAL_RANK=2: above 1; 0 to 1",
        ),
        (
            {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "3"},
            "LOCAL_WORLD_SIZE=3: above 2; the processes on this machine, 1 to 2",
        ),
    ],
)
def test_a_malformed_torchrun_variable_is_one_line_naming_it(torchrun_env, values, line):
    torchrun_env(**values)
    with pytest.raises(ConfigError) as info:
        ranks.launched()
    assert str(info.value) == line + SUFFIX


def test_a_data_parallel_process_without_its_rank_or_rendezvous_is_one_line(torchrun_env):
    torchrun_env(WORLD_SIZE="2")
    with pytest.raises(ConfigError, match=r"^WORLD_SIZE=2: RANK is not set; .*\(0 to 1\)"):
        ranks.launched()
    torchrun_env(RANK="0")
    assert ranks.launched().enabled  # an embedding user may join the group another way
    with pytest.raises(ConfigError, match=r"^WORLD_SIZE=2: MASTER_ADDR is not set; "):
        ranks.checked()
    torchrun_env(MASTER_ADDR="127.0.0.1")
    with pytest.raises(ConfigError, match=r"^WORLD_SIZE=2: MASTER_PORT is not set; "):
        ranks.checked()
    torchrun_env(MASTER_PORT="http")
    with pytest.raises(ConfigError, match=r"^MASTER_PORT=http: not a whole number; rank 0's port"):
        ranks.checked()

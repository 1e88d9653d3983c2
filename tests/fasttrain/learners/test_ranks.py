"""Where this process stands, from torchrun's environment variables."""

from fasttrain.learners import ranks


def test_one_process_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert ranks.launched() is ranks.SINGLE
    assert ranks.SINGLE.main and not ranks.SINGLE.enabled


def test_torchruns_variables_give_the_ranks(monkeypatch):
    for key, value in {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    got = ranks.launched()
    assert got == ranks.Ranks(rank=3, world=4, local_rank=1, local_world=4)
    assert got.enabled and not got.main

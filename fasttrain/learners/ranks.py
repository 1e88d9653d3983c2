"""Where this process stands in a data-parallel run, from torchrun's environment variables:
torch-free, so the command line can say which rank speaks before torch is imported. The rest of
data-parallel training is ``fasttrain.learners.distributed``."""

from __future__ import annotations

import os
from dataclasses import dataclass


class RankStopped(Exception):
    """Rank 0 refused the run (its one-line error is printed there); the other ranks stop."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands: rank, world size and, within its machine, the local ones."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


SINGLE = Ranks()


def launched() -> Ranks:
    """The ranks torchrun's environment variables describe (one process without them)."""
    env = os.environ
    if int(env.get("WORLD_SIZE", "1")) <= 1:
        return SINGLE
    return Ranks(
        rank=int(env["RANK"]),
        world=int(env["WORLD_SIZE"]),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        local_world=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
    )

"""Where this process stands in a data-parallel run, from torchrun's environment variables:
torch-free, so the command line can say which rank speaks before torch is imported. The rest of
data-parallel training is ``fasttrain.learners.distributed``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fasttrain.environ import whole_number
from fasttrain.errors import ConfigError


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
    """The ranks torchrun's environment variables describe (one process without them); a
    malformed or missing one is a ConfigError in one line (``WORLD_SIZE=abc: ...``)."""
    world = whole_number(
        "WORLD_SIZE", 1, None, TORCHRUN_SETS.format("the number of processes, 1 or more")
    )
    if world is None or world == 1:
        return SINGLE
    if "RANK" not in os.environ:
        raise ConfigError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']}: RANK is not set; each process of a "
            f"data-parallel run needs its RANK (0 to {world - 1}): {START_THEM}"
        )
    rank = whole_number("RANK", 0, world - 1, TORCHRUN_SETS.format(f"0 to {world - 1}"))
    local_world = whole_number(
        "LOCAL_WORLD_SIZE",
        1,
        world,
        TORCHRUN_SETS.format(f"the processes on this machine, 1 to {world}"),
    )
    local_world = world if local_world is None else local_world
    local_rank = whole_number(
        "LOCAL_RANK", 0, local_world - 1, TORCHRUN_SETS.format(f"0 to {local_world - 1}")
    )
    return Ranks(rank=rank, world=world, local_rank=local_rank or 0, local_world=local_world)


def checked() -> Ranks:
    """``launched()``, and in a data-parallel process the variables torch's ``env://``
    rendezvous reads (``MASTER_ADDR``, ``MASTER_PORT``; an embedding user may join the
    process group another way): what ``fasttrain run`` checks before anything else."""
    ranks = launched()
    if not ranks.enabled:
        return ranks
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise ConfigError(
                f"WORLD_SIZE={ranks.world}: {name} is not set; the processes of a data-parallel "
                f"run meet at rank 0's MASTER_ADDR and MASTER_PORT: {START_THEM}"
            )
    whole_number("MASTER_PORT", 1, 65535, TORCHRUN_SETS.format("rank 0's port, 1 to 65535"))
    return ranks


# how a torchrun variable's valid values are said: what torchrun sets it to
TORCHRUN_SETS = "{}, as torchrun sets it (fasttrain run --nproc N starts torchrun)"
# what a process missing torchrun's variables is told
START_THEM = (
    "start them with fasttrain run --nproc N or torchrun, or unset WORLD_SIZE for one process"
)

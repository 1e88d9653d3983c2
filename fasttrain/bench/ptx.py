"""``python -m fasttrain.bench.ptx [GAME ...] [--cc 9.0] [--layout L]``: compile every kernel to PTX
offline.

Compiles the registered games' step and reset kernels (over the buffers' ``--layout``, default the
cuda backend's), the learner kernels (GAE) and the observation copy with the real numba-cuda
compiler, with no GPU, and prints one line per kernel: PTX size and, where ``ptxas`` is installed
(the test extra brings it), registers and spill stores.
"""

from __future__ import annotations

import argparse
import re
import sys

from fasttrain import games
from fasttrain.kernels.env import LAYOUTS
from fasttrain.kernels.ptx import report


def main(argv=None) -> int:
    """Parse ``argv``, compile the named games (default: all) and print the report."""
    parser = argparse.ArgumentParser(prog="python -m fasttrain.bench.ptx", description=__doc__)
    names = games.names()
    parser.add_argument(
        "games", nargs="*", metavar="GAME", help=f"default: all ({', '.join(names)})"
    )
    parser.add_argument("--cc", default="9.0", help="compute capability, e.g. 8.0, 9.0")
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=None,
        help="buffer layout (default: the cuda backend's)",
    )
    opts = parser.parse_args(argv)
    unknown = [name for name in opts.games if name not in names]
    if unknown:
        parser.exit(2, f"unknown game {unknown[0]!r}; valid: {', '.join(names)}\n")
    match = re.fullmatch(r"(\d+)\.(\d+)", opts.cc)
    if match is None:
        parser.exit(2, f"--cc must be a compute capability such as 9.0, got {opts.cc!r}\n")
    cc = (int(match[1]), int(match[2]))
    try:
        lines = report([games.get(name) for name in opts.games or names], cc, opts.layout)
    except RuntimeError as exc:  # no numba-cuda, the simulator switched on, ptxas failing
        parser.exit(1, f"fasttrain.bench.ptx: {exc}\n")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

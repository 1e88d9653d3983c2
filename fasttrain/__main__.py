"""``python -m fasttrain``: the ``fasttrain`` command (what torchrun starts: ``torchrun
--nproc_per_node N -m fasttrain run ...``)."""

from fasttrain.cli import entry

entry()

"""``python -m fasttrain`` and the ``fasttrain`` console script: the ``fasttrain`` command (what
torchrun starts: ``torchrun --nproc_per_node N -m fasttrain run ...``)."""

from fasttrain.run import startup


def main():
    startup.take()  # a Ctrl-C while click, torch and Numba import: one line, not a traceback
    from fasttrain.cli import entry

    entry()


if __name__ == "__main__":
    main()

"""``fasttrain bench``: throughput of games, training, a per-step baseline and peers."""

from __future__ import annotations

import click


@click.command()
def bench():
    """Measure env-steps/s and training SPS (being written)."""
    raise click.ClickException("fasttrain bench is not implemented yet")

"""The ``egress`` command line."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """egress: long exports of large databases as durable, resumable jobs."""

"""The ``egress`` command line.

Each subcommand lives in its own module of this package, named in ``SUBCOMMANDS`` below
and imported only when it runs. ``main`` turns every ``EgressError`` into one line on
stderr and an exit code (see :mod:`egress.cli.errors`): a user never sees a traceback
for a bad input.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from egress import __version__
from egress.cli.errors import EXIT_INTERRUPTED, exit_code_for, one_line
from egress.exceptions import EgressError
from egress.memory import skip_final_collections, use_system_allocator

#: Each subcommand and where it is defined: a module is imported only when its command
#: runs (or ``--help`` lists them all), so an operator's ``egress jobs ls`` does not load
#: the export engine, and ``egress export`` does not load the job store.
SUBCOMMANDS = {
    "audit": "egress.cli.audit:audit",
    "config": "egress.cli.config:config_group",
    "demo": "egress.cli.demo:demo_command",
    "export": "egress.cli.export:export_command",
    "jobs": "egress.cli.jobs:jobs",
    "migrate": "egress.cli.jobs:migrate",
    "serve": "egress.cli.serve:serve",
    "tokens": "egress.cli.tokens:tokens",
    "worker": "egress.cli.jobs:worker",
}


class EgressGroup(click.Group):
    """A click group whose subcommands report egress errors as ``egress: error: …``,
    each imported when it is first asked for (``SUBCOMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        known = super().get_command(ctx, cmd_name)
        if known is not None or cmd_name not in SUBCOMMANDS:
            return known
        module, _, name = SUBCOMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command), SUBCOMMANDS[cmd_name]
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EgressError as exc:
            click.echo(f"egress: error: {one_line(exc)}", err=True)
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt:
            # Ctrl-C outside a command's own handling (e.g. while starting up)
            click.echo("egress: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=EgressGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="egress")
def main() -> None:
    """egress: long exports of large databases as durable, resumable jobs."""
    use_system_allocator()


def run() -> None:
    """The ``egress`` command (and ``python -m egress.cli``): ``main``, then the
    process's exit without the interpreter's last garbage collections."""
    try:
        main()
    finally:
        skip_final_collections()


__all__ = ["main", "run"]

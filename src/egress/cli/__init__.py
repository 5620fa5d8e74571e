"""The ``egress`` command line.

Each subcommand lives in its own module of this package and is registered on ``main``
below. ``main`` turns every ``EgressError`` into one line on stderr and an exit code
(see :mod:`egress.cli.errors`): a user never sees a traceback for a bad input.
"""

from __future__ import annotations

from typing import Any

import click

from egress import __version__
from egress.cli.audit import audit
from egress.cli.config import config_group
from egress.cli.demo import demo_command
from egress.cli.errors import EXIT_INTERRUPTED, exit_code_for, one_line
from egress.cli.export import export_command
from egress.cli.jobs import COMMANDS as JOB_COMMANDS
from egress.cli.serve import serve
from egress.cli.tokens import COMMANDS as TOKEN_COMMANDS
from egress.exceptions import EgressError
from egress.memory import skip_final_collections, use_system_allocator


class EgressGroup(click.Group):
    """A click group whose subcommands report egress errors as ``egress: error: …``."""

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


main.add_command(export_command)
main.add_command(demo_command)
main.add_command(serve)
main.add_command(audit)
main.add_command(config_group)
for _command in (*JOB_COMMANDS, *TOKEN_COMMANDS):
    main.add_command(_command)



def run() -> None:
    """The ``egress`` command (and ``python -m egress.cli``): ``main``, then the
    process's exit without the interpreter's last garbage collections."""
    try:
        main()
    finally:
        skip_final_collections()


__all__ = ["main", "run"]

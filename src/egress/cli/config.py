"""``egress config check [FILE]`` and ``egress config reference``: what configuration is
in force, and every setting there is (docs/configuration.md)."""

from __future__ import annotations

import os
import sys

import click

from egress.cli.jobs import home_option


@click.group("config")
def config_group() -> None:
    """Check the configuration; list every setting."""


@config_group.command("check")
@home_option
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def check(home: str | None, file: str | None) -> None:
    """Validate the configuration (FILE, else EGRESS_CONFIG, else HOME/egress.toml, with
    the EGRESS_* variables over it) and print the settings in force, secrets masked."""
    from egress.config import config_path, default_home, load_settings, unknown_variables
    from egress.config_reference import check_destinations, effective_toml
    from egress.exceptions import ConfigError
    from egress.sources import SOURCE_KINDS, source_kind

    settings = load_settings(home, config_file=file)
    problems = check_destinations(settings)
    for name, url in sorted(settings.sources.items()):
        if source_kind(url) not in SOURCE_KINDS:
            problems.append(f"sources.{name}: unknown kind {source_kind(url) or url!r}; "
                            f"allowed: {', '.join(sorted(SOURCE_KINDS))}")
    if settings.worker.api_url and not settings.worker.api_token:
        problems.append("worker.api_url is set without worker.api_token "
                        "(EGRESS_WORKER_API_TOKEN)")
    if problems:
        raise ConfigError("; ".join(problems))
    where = file or config_path(settings.home if home is None else default_home(
        {"EGRESS_HOME": home}), os.environ)
    click.echo(f"# configuration: {where}"
               + ("" if os.path.exists(where) else " (absent: defaults and variables only)"))
    click.echo(effective_toml(settings), nl=False)
    for name in unknown_variables(os.environ):
        click.echo(f"egress: warning: {name} is set but no setting reads it", err=True)
    click.echo("configuration is valid", err=True)


@config_group.command("reference")
def reference() -> None:
    """Every setting of the sections, with its default, variable and meaning (Markdown)."""
    from egress.config_reference import reference_markdown

    sys.stdout.write(reference_markdown())

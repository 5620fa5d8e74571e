"""``egress export``: a one-shot export in this process, with progress bars and --resume.

Ctrl-C (or SIGTERM) commits the part in hand and prints the command that resumes; a
second Ctrl-C quits at once (committed parts are kept either way). The printed command
never holds a password: the source URL is shown without it, and libpq-based sources read
it from ``PGPASSWORD`` (or put it back into ``--source`` by hand). ``--resume`` accepts the
URL with or without the password.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import click

from egress.cli.displays import PROGRESS_MODES, make_display
from egress.cli.errors import EXIT_OK, exit_code_for_signal
from egress.cli.params import SIZE, Size, parse_delimiter
from egress.cli.signals import GracefulStop, run_in_thread, write_stderr
from egress.engine.plan import DEFAULT_PART_SIZE
from egress.exceptions import ConfigError
from egress.formats import COMPRESSIONS, FORMATS, check_format, resolve_compression
from egress.formats.csv import DIALECTS as CSV_DIALECTS
from egress.redact import without_password


@dataclass(frozen=True)
class ExportArgs:
    """The options of one ``egress export``, as the user gave them."""

    source: str
    out: str
    format: str
    tables: tuple[str, ...] = ()
    all_tables: bool = False
    compression: str | None = None
    max_file_size: Size | None = None
    part_size: Size | None = None
    max_value_size: Size | None = None
    part_rows: int | None = None
    row_group_size: Size | None = None
    slice_seconds: float | None = None
    delimiter: str | None = None
    #: egress (default) or postgres: PostgreSQL writes the CSV itself
    csv_dialect: str | None = None
    quiet: bool = False
    #: auto (bars on a terminal, lines elsewhere), bar, lines or none
    progress: str = "auto"
    progress_interval: float = 10.0
    options: dict[str, Any] = field(default_factory=dict)
    query: str | None = None
    key: tuple[str, ...] = ()
    name: str | None = None
    #: remote engines (trino://): the role, and client tags besides egress-export
    role: str | None = None
    client_tags: tuple[str, ...] = ()
    #: every table in one snapshot (not resumable: the snapshot ends with the run)
    snapshot: bool = False

    def resume_argv(self, program: list[str]) -> list[str]:
        """The command that continues this export: the same options plus ``--resume``."""
        argv = [*program, "export", "--source", strip_password(self.source)[0]]
        if self.all_tables:
            argv.append("--all")
        for table in self.tables:
            argv += ["--table", table]
        if self.query is not None:
            argv += ["--query", self.query]
            for k in self.key:
                argv += ["--key", k]
            if self.name is not None:
                argv += ["--name", self.name]
        argv += ["--format", self.format, "--out", self.out]
        if self.role is not None:
            argv += ["--role", self.role]
        for tag in self.client_tags:
            argv += ["--client-tag", tag]
        if self.compression is not None:
            argv += ["--compression", self.compression]
        if self.max_file_size is not None:
            argv += ["--max-file-size", self.max_file_size.text]
        if self.part_size is not None:
            argv += ["--part-size", self.part_size.text]
        if self.max_value_size is not None:
            argv += ["--max-value-size", self.max_value_size.text]
        if self.part_rows is not None:
            argv += ["--part-rows", str(self.part_rows)]
        if self.row_group_size is not None:
            argv += ["--row-group-size", self.row_group_size.text]
        if self.slice_seconds is not None:
            argv += ["--slice-seconds", repr(self.slice_seconds)]
        if self.delimiter is not None:
            argv += ["--delimiter", self.delimiter]
        if self.csv_dialect is not None:
            argv += ["--csv-dialect", self.csv_dialect]
        if self.quiet:
            argv.append("--quiet")
        elif self.progress != "auto":
            argv += ["--progress", self.progress]
        return [*argv, "--resume"]


def strip_password(url: str) -> tuple[str, bool]:
    """``postgresql://u:secret@h/db`` → (``postgresql://u@h/db``, True)."""
    shown = without_password(url)
    return shown, shown != url


def program_argv(ctx: click.Context) -> list[str]:
    """How this process was started, as the start of a command the user can run again."""
    name = ctx.find_root().info_name or "egress"
    if name.startswith("python -m "):
        return [sys.executable, "-m", name.removeprefix("python -m ")]
    argv0 = sys.argv[0] if sys.argv else ""
    found = shutil.which(name)
    if os.path.basename(argv0) == name and os.path.isfile(argv0):
        # the bare name only when it runs this very program from PATH
        if found and os.path.samefile(found, argv0):
            return [name]
        return [argv0]
    return [name]


def resume_text(args: ExportArgs, program: list[str]) -> str:
    if args.snapshot:
        return (f"  (none: a --snapshot export cannot be resumed, its snapshot ended with this "
                f"run; delete {args.out} and run the export again)")
    lines = [f"  {shlex.join(args.resume_argv(program))}"]
    if strip_password(args.source)[1]:
        lines.append(
            "  (the password is not shown: set PGPASSWORD, or MYSQL_PWD for MySQL, "
            "or put it back into --source)"
        )
    return "\n".join(lines)


def run_export(
    args: ExportArgs, program: list[str], *, resume: bool
) -> int:
    """Run the export with progress bars and signal handling; returns the exit code."""
    from egress.oneshot import export

    check_format(args.format)
    resolve_compression(args.format, args.compression)
    if args.tables and args.all_tables:
        raise ConfigError("use --table NAME (repeatable) or --all, not both")
    if args.query is not None and (args.tables or args.all_tables):
        raise ConfigError("use --query or --table/--all, not both")
    if args.query is not None and not args.key:
        # the CLI's own words (the library and the API name their `key` parameter)
        raise ConfigError("--query needs --key COLUMN: a result column that is unique and NOT "
                          "NULL, by which egress pages the result and resumes it (repeat "
                          "--key for a composite key)")
    if args.query is None and (args.key or args.name is not None):
        raise ConfigError("--key and --name go with --query")
    if args.query is None and not args.tables and not args.all_tables:
        raise ConfigError("name the tables to export with --table NAME (repeatable), use --all, "
                          "or export a read-only query with --query SQL --key COLUMN")
    if "://" not in args.source:
        raise ConfigError(
            f"--source must be a URL such as sqlite:///{args.source} or "
            "postgresql://user@host:5432/dbname (or mysql://user@host:3306/dbname, "
            "trino://user@host:8080/catalog/schema)"
        )
    options = dict(args.options)
    if args.delimiter is not None:
        if args.format != "csv":
            raise ConfigError(f"--delimiter applies to --format csv only, not {args.format}")
        options["delimiter"] = parse_delimiter(args.delimiter)
    if args.csv_dialect is not None:
        if args.format != "csv":
            raise ConfigError(f"--csv-dialect applies to --format csv only, not {args.format}")
        if args.csv_dialect != "egress":
            options["csv_dialect"] = args.csv_dialect
    if args.row_group_size is not None:
        if args.format != "parquet":
            raise ConfigError(f"--row-group-size applies to --format parquet only, not "
                              f"{args.format}")
        options["row_group_bytes"] = int(args.row_group_size)

    progress = make_progress(args)
    hint = resume_text(args, program)

    def on_stopping(signum: int) -> None:
        text = "Stopping after the part in hand… (press Ctrl-C again to quit at once)"
        if progress is not None:
            progress.notice(text)
        else:
            write_stderr(f"egress: {text}\n")

    def on_abort() -> str:
        return f"\negress: stopped at once; committed parts are kept. Resume with:\n{hint}\n"

    started = time.monotonic()
    with GracefulStop(on_stopping, on_abort) as stop:
        work = partial(_export, export, args, options, resume, progress, stop)
        if progress is not None:
            with progress:
                result = run_in_thread(work)
        else:
            result = run_in_thread(work)
    if result.interrupted:
        click.echo(f"egress: interrupted; committed parts are kept. Resume with:\n{hint}", err=True)
        return exit_code_for_signal(stop.signum or 2)
    if not args.quiet and result.manifest is not None:
        text = summary(result.manifest, result.out, time.monotonic() - started)
        click.echo(text)
    return EXIT_OK


def make_progress(args: ExportArgs) -> Any:
    """Bars on a terminal, plain lines on a pipe or file (cron, CI), or nothing."""
    return make_display("none" if args.quiet else args.progress, args.progress_interval)


def _export(
    export: Any,
    args: ExportArgs,
    options: dict[str, Any],
    resume: bool,
    progress: Any,
    stop: GracefulStop,
) -> Any:
    return export(
        args.source,
        list(args.tables),
        to=args.out,
        format=args.format,
        compression=args.compression,
        all_tables=args.all_tables,
        # plain ints: the engine copies and serialises these values
        max_file_size=None if args.max_file_size is None else int(args.max_file_size),
        part_size=int(args.part_size or DEFAULT_PART_SIZE),
        part_rows=args.part_rows,
        slice_seconds=args.slice_seconds or 5.0,
        resume=resume,
        options=options,
        progress=progress,
        should_stop=stop,
        query=args.query,
        key=[k.strip() for item in args.key for k in item.split(",") if k.strip()] or None,
        name=args.name,
        role=args.role,
        client_tags=args.client_tags,
        snapshot=args.snapshot,
        **({} if args.max_value_size is None else {"max_value_bytes": int(args.max_value_size)}),
    )


def summary(manifest: dict[str, Any], out: Path | str, seconds: float) -> str:
    """What was written, per table, and where the manifest is."""
    tables = manifest["tables"]
    lines = [
        f"Exported {len(tables)} table{'s' if len(tables) != 1 else ''}, "
        f"{manifest['total_rows']:,} rows, {_size(manifest['total_bytes'])} "
        f"in {seconds:.1f} s to {out}"
    ]
    width = max((len(t["table"]) for t in tables), default=0)
    for t in tables:
        names = t["files"]
        where = names[0] if len(names) == 1 else f"{len(names)} files: {names[0]} … {names[-1]}"
        lines.append(
            f"  {t['table']:<{width}}  {t['rows']:>12,} rows  {_size(t['bytes']):>9}  {where}"
        )
    lines.append(f"Manifest: {str(out).rstrip('/')}/manifest.json")
    return "\n".join(lines)


def _size(n: int) -> str:
    from rich.filesize import decimal

    return decimal(n)


@click.command("export")
@click.option("--source", required=True, metavar="URL",
              help="Database URL: sqlite:///path.db, postgresql://user:pass@host:port/db "
                   "or mysql://user:pass@host:port/db.")
@click.option("--table", "tables", multiple=True, metavar="NAME",
              help="A table to export; repeat for several.")
@click.option("--all", "all_tables", is_flag=True, help="Export every table of the source.")
@click.option("--query", default=None, metavar="SQL",
              help="Export the result of one read-only SELECT instead of tables (needs --key).")
@click.option("--key", "key", multiple=True, metavar="COLUMN",
              help="With --query: a result column of the unique, NOT NULL key the result is "
                   "paged and resumed by; repeat (or comma-separate) for several.")
@click.option("--name", default=None, metavar="NAME",
              help="With --query: the output's name (default: query).")
@click.option("--format", "fmt", required=True, metavar="FORMAT",
              help=f"Output format: {', '.join(sorted(FORMATS))}.")
@click.option("--out", required=True, metavar="DIR", help="Output directory.")
@click.option("--role", default=None, metavar="ROLE",
              help="Remote engines (trino://…): the role the engine runs the export as "
                   "(required for them).")
@click.option("--client-tag", "client_tags", multiple=True, metavar="TAG",
              help="Remote engines: a client tag for the export's queries; repeatable.")
@click.option("--compression", default=None, metavar="NAME",
              help=f"{', '.join(sorted(COMPRESSIONS))}; Parquet: the codec inside the files "
                   "(none, snappy, gzip, zstd; default zstd). Default: none for text formats.")
@click.option("--max-file-size", type=SIZE, default=None,
              help="Start a new numbered file past this size (64MB, 1GiB…).")
@click.option("--part-size", type=SIZE, default=None,
              help="Target size of a committed part (default 8MiB).")
@click.option("--part-rows", type=click.IntRange(min=1), default=None,
              help="Rows per committed part (default: from --part-size).")
@click.option("--max-value-size", type=SIZE, default=None,
              help="Largest text or binary value a row may hold (default 64MiB): a larger "
                   "one stops the export, naming its row.")
@click.option("--slice-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Length of a slice between checkpoints (default 5).")
@click.option("--row-group-size", type=SIZE, default=None,
              help="Parquet: most bytes of rows (as read) in one row group (default 16MiB; "
                   "8MiB uncompressed); larger row groups use more memory.")
@click.option("--delimiter", default=None, metavar="CHAR",
              help="CSV field delimiter (default ','; '\\t' or 'tab' for a tab).")
@click.option("--csv-dialect", type=click.Choice(CSV_DIALECTS), default=None,
              help="CSV: egress (RFC 4180, the default) or postgres (PostgreSQL tables "
                   "only: the server writes its own CSV, as psql's \\copy … CSV does; "
                   "faster; see docs/formats.md).")
@click.option("--snapshot", is_flag=True,
              help="Read every table in one snapshot taken at the start (PostgreSQL, SQLite "
                   "tables); such a run cannot be resumed, only run again.")
@click.option("--resume", is_flag=True, help="Continue the unfinished export in --out.")
@click.option("--progress", "progress_mode", type=click.Choice(PROGRESS_MODES),
              default="auto", show_default=True,
              help="bar: progress bars; lines: a plain line per table every "
                   "--progress-interval seconds; auto: bars on a terminal, else lines.")
@click.option("--progress-interval", type=click.FloatRange(min=0), default=10.0,
              show_default=True, metavar="SECONDS", help="Seconds between progress lines.")
@click.option("--quiet", "-q", is_flag=True, help="No progress and no summary.")
@click.pass_context
def export_command(
    ctx: click.Context,
    source: str,
    tables: tuple[str, ...],
    all_tables: bool,
    query: str | None,
    key: tuple[str, ...],
    name: str | None,
    fmt: str,
    out: str,
    role: str | None,
    client_tags: tuple[str, ...],
    compression: str,
    max_file_size: Size | None,
    part_size: Size | None,
    part_rows: int | None,
    max_value_size: Size | None,
    slice_seconds: float | None,
    delimiter: str | None,
    csv_dialect: str | None,
    row_group_size: Size | None,
    snapshot: bool,
    resume: bool,
    progress_mode: str,
    progress_interval: float,
    quiet: bool,
) -> None:
    """Export tables (or one read-only --query) to files, resumable after Ctrl-C, a crash
    or kill -9.

    The output directory receives the files, then manifest.json and last _SUCCESS.
    """
    args = ExportArgs(
        source=source, out=out, format=fmt, tables=tables, all_tables=all_tables,
        compression=compression, max_file_size=max_file_size, part_size=part_size,
        part_rows=part_rows, max_value_size=max_value_size, slice_seconds=slice_seconds,
        delimiter=delimiter, csv_dialect=csv_dialect, quiet=quiet, row_group_size=row_group_size,
        query=query, key=key, name=name, progress=progress_mode,
        progress_interval=progress_interval, role=role, client_tags=client_tags,
        snapshot=snapshot,
    )
    ctx.exit(run_export(args, program_argv(ctx), resume=resume))

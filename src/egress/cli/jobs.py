"""CLI commands of the job system: ``worker``, ``jobs …`` and ``migrate``.

They work on the home directory's settings (``--home`` / ``EGRESS_HOME``): the store in
``egress.toml`` (SQLite in the home by default), named sources and destinations.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any, cast

import click

from egress import stored_exports
from egress.cli.displays import PROGRESS_MODES, make_display
from egress.cli.params import SIZE, Size
from egress.config import Settings, load_settings
from egress.domain.jobs import ExportState
from egress.exceptions import ConfigError
from egress.export_view import ExportView, export_view
from egress.home import ensure_home
from egress.store.base import JobStore, WorkerStore

home_option = click.option(
    "--home", envvar="EGRESS_HOME", type=click.Path(file_okay=False),
    help="Home directory with egress.toml and the embedded state [env EGRESS_HOME].",
)
project_option = click.option(
    "--project", default=stored_exports.DEFAULT_PROJECT, show_default=True, help="Project (tenant)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
log_format_option = click.option(
    "--log-format", type=click.Choice(["auto", "json", "text"]), envvar="EGRESS_LOG_FORMAT",
    default="auto", show_default=True,
    help="Log lines as JSON (for collectors) or key=value text; auto: text on a terminal, "
         "JSON otherwise [env EGRESS_LOG_FORMAT].")


def open_store(settings: Settings) -> JobStore:
    from egress.store.sql import SqlJobStore

    ensure_home(settings.home)
    store = SqlJobStore(settings.store_url)
    store.migrate()
    return store


def _run(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; egress errors propagate to ``main``, which prints one line and exits
    with the code of :mod:`egress.cli.errors`."""
    return fn()


def _settings(home: str | None) -> Settings:
    return _run(lambda: load_settings(home))


@click.command()
@home_option
@click.option("--concurrency", type=click.IntRange(1, 64), help="Tasks run at once.")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit once no export is queued or running (after dead workers' leases end).")
@click.option("--log-level", default="INFO", show_default=True)
@log_format_option
@click.option("--api", "api_url", metavar="URL",
              help="Reach the job store through the API at URL (no database credentials "
                   "here) [env EGRESS_WORKER_API_URL; worker.api_url].")
@click.option("--token", "api_token", envvar="EGRESS_WORKER_API_TOKEN", metavar="TOKEN",
              help="Token of scope 'worker' for --api [env EGRESS_WORKER_API_TOKEN; "
                   "prefer the environment: a command line is visible to other users].")
@click.option("--metrics-port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve /metrics, /healthz and /readyz on this port; 0: not at all "
                   "[default 9464; env EGRESS_WORKER_METRICS_PORT; worker.metrics_port].")
@click.option("--metrics-host", metavar="ADDRESS",
              help="Address of that server [default 127.0.0.1; a container: 0.0.0.0; env "
                   "EGRESS_WORKER_METRICS_HOST; worker.metrics_host].")
def worker(home: str | None, concurrency: int | None, exit_when_idle: bool, log_level: str,
           log_format: str, api_url: str | None, api_token: str | None,
           metrics_port: int | None, metrics_host: str | None) -> None:
    """Claim and run export tasks until stopped (SIGTERM finishes the parts in hand)."""
    from egress.logs import setup_logging
    from egress.worker.priority import lower_process_priority

    setup_logging(log_level, log_format)
    settings = _settings(home)
    # before the engine's imports start threads of their own (they inherit it)
    lower_process_priority(settings.worker.nice)
    from egress.worker.loop import Worker

    api_url = api_url or settings.worker.api_url
    if api_url:
        from egress.store.over_api import open_worker_store

        token = api_token or settings.worker.api_token
        store: WorkerStore = _run(lambda: open_worker_store(api_url, token))
    else:
        store = _run(lambda: open_store(settings))
    w = Worker(store, settings, concurrency=concurrency)
    try:
        stop_probes = _run(lambda: _start_probes(store, settings, w.health, metrics_host,
                                                 metrics_port))
    except BaseException:
        store.close()
        raise
    w.install_signal_handlers()
    try:
        code = w.run(exit_when_idle=exit_when_idle)
    finally:
        stop_probes()
    store.close()
    sys.exit(code)


def _start_probes(store: WorkerStore, settings: Settings, health: Any, host: str | None,
                  port: int | None) -> Callable[[], None]:
    """The worker's /metrics, /healthz and /readyz (worker/probes.py), unless the port is
    0; returns what stops them."""
    from egress.metrics import STORE_STATS
    from egress.worker.probes import ProbeServer

    w = settings.worker
    port = w.metrics_port if port is None else port
    if port == 0:
        return lambda: None
    server = ProbeServer(store, health, host=host or w.metrics_host, port=port,
                         stale_seconds=w.health_stale_seconds).start()
    # the queue gauges need the store's own query: not there for an --api worker (the
    # API's /metrics has them)
    stats = cast(JobStore, store) if hasattr(store, "queue_stats") else None
    if stats is not None:
        STORE_STATS.attach(stats)

    def stop() -> None:
        if stats is not None:
            STORE_STATS.detach(stats)
        server.stop()

    return stop


@click.command()
@home_option
def migrate(home: str | None) -> None:
    """Create or upgrade the job store's schema."""
    settings = _settings(home)
    store = _run(lambda: open_store(settings))
    store.close()
    click.echo(f"store is up to date: {_redacted(settings.store_url)}")


def _redacted(url: str) -> str:
    from egress.redact import redact_url

    return redact_url(url)


@click.group()
def jobs() -> None:
    """Create, list, show, cancel, retry and delete exports in the job store."""


@jobs.command("create")
@home_option
@project_option
@click.option("--source", required=True, help="A configured source name, or a URL.")
@click.option("--table", "tables", multiple=True, help="Table to export (repeatable).")
@click.option("--all", "all_tables", is_flag=True, help="Every table of the source.")
@click.option("--format", "fmt", default="csv", show_default=True, metavar="FORMAT",
              # written out: egress.formats imports pyarrow, which no other command of
              # this module needs (tests/unit/test_cli_imports.py keeps the lists whole)
              help="Output format: csv, json, jsonl, parquet, sql.")
@click.option("--compression", default=None, metavar="NAME",
              help="gzip, none, zstd; Parquet: the codec inside the files "
                   "(none, snappy, gzip, zstd; default zstd). Default: none for text formats.")
@click.option("--destination", default="local", show_default=True,
              help="A destination of egress.toml (local: the home's exports/ directory).")
@click.option("--delimiter", help="CSV field delimiter (default ',').")
@click.option("--csv-dialect", type=click.Choice(["egress", "postgres"]), default=None,
              help="CSV: egress (default) or postgres (PostgreSQL writes its own CSV).")
@click.option("--max-file-size", type=SIZE, default=None,
              help="Start a new numbered file past this size (64MB, 1GiB…), as for export.")
@click.option("--part-rows", type=click.IntRange(1), help="Rows per part.")
@click.option("--row-group-size", type=SIZE, default=None,
              help="Parquet: most bytes of rows (as read) in one row group (default 16MiB; "
                   "8MiB uncompressed); larger row groups use more memory.")
@click.option("--query", default=None, metavar="SQL",
              help="Export the result of one read-only SELECT instead of tables (needs --key).")
@click.option("--key", "key", multiple=True, metavar="COLUMN",
              help="With --query: the unique, NOT NULL result column(s) it is paged by.")
@click.option("--name", default=None, metavar="NAME",
              help="With --query: the output's name (default: query).")
@click.option("--role", default=None, metavar="ROLE",
              help="Remote engines (trino://…): the role the engine runs the export as "
                   "(required for them).")
@click.option("--client-tag", "client_tags", multiple=True, metavar="TAG",
              help="Remote engines: a client tag for the export's queries; repeatable.")
@click.option("--mode", type=click.Choice(["direct", "unload"]), default=None,
              help="Remote engines: direct (egress writes the result; default) or unload "
                   "(Starburst's system.unload writes Parquet itself).")
@click.option("--snapshot", is_flag=True,
              help="Read every table in one consistent snapshot (PostgreSQL sources; "
                   "docs/jobs.md, Consistency).")
@click.option("--split", default=None, metavar="N|auto|false",
              help="Read each table as N key ranges (2-64) by as many workers at once, or "
                   "auto (one per split_rows estimated rows). SQLite, PostgreSQL, DuckDB "
                   "and MySQL/MariaDB tables. false: never split. Default: tables above "
                   "split_rows split where the file stays the same bytes (docs/jobs.md).")
@click.option("--split-files/--no-split-files", "split_files", default=None,
              help="With --split: each range its own numbered files (--split-files), or one "
                   "file per table with the bytes one task would write (--no-split-files; "
                   "tables with a one-column key, no filters). Default: one file "
                   "where that applies, range files elsewhere.")
@click.option("--idempotency-key", help="The same key and request return the same export.")
@json_option
def jobs_create(
    home: str | None, project: str, source: str, tables: tuple[str, ...], all_tables: bool,
    fmt: str, compression: str, destination: str, delimiter: str | None,
    csv_dialect: str | None, max_file_size: Size | None, part_rows: int | None,
    row_group_size: Size | None, query: str | None,
    key: tuple[str, ...], name: str | None, role: str | None, client_tags: tuple[str, ...],
    mode: str | None, snapshot: bool, split: str | None, split_files: bool | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Queue an export; prints its id."""
    settings = _settings(home)
    options: dict[str, Any] = {}
    if query is not None:
        keys = [k.strip() for item in key for k in item.split(",") if k.strip()]
        options["query"] = {"sql": query, "key": keys, "name": name}
    elif key or name is not None:
        raise ConfigError("--key and --name go with --query")
    if role is not None:
        options["role"] = role
    if client_tags:
        options["client_tags"] = list(client_tags)
    if mode is not None:
        options["mode"] = mode
    if delimiter is not None:
        options["delimiter"] = delimiter
    if csv_dialect is not None:
        options["csv_dialect"] = csv_dialect
    if max_file_size is not None:
        options["max_file_size"] = int(max_file_size)
    if part_rows is not None:
        options["part_rows"] = part_rows
    if row_group_size is not None:
        if fmt != "parquet":
            raise ConfigError(f"--row-group-size applies to --format parquet only, not {fmt}")
        options["row_group_size"] = int(row_group_size)
    if snapshot:
        options["snapshot"] = True
    if split is not None:
        # checked by the manager
        options["split"] = (int(split) if split.isdigit()
                            else False if split.lower() == "false" else split)
    if split_files is not None:
        options["split_files"] = split_files
    from egress import manager  # the sources and the engine: only to create

    request = manager.ExportRequest(
        source=source, tables=tables, all_tables=all_tables, format=fmt,
        compression=compression, destination=destination, options=options,
    )

    def create() -> tuple[Any, bool]:
        store = open_store(settings)
        try:
            return manager.create_export(
                store, settings, request, project=project, idempotency_key=idempotency_key
            )
        finally:
            store.close()

    export, created = _run(create)
    if as_json:
        click.echo(json.dumps({"id": export.id, "status": str(export.state), "created": created}))
    else:
        click.echo(export.id)


@jobs.command("ls")
@home_option
@project_option
@click.option("--status", type=click.Choice([s.value for s in ExportState]), multiple=True)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
def jobs_ls(home: str | None, project: str, status: tuple[str, ...], limit: int,
            as_json: bool) -> None:
    """List exports, newest first."""
    settings = _settings(home)

    def listing() -> list[ExportView]:
        store = open_store(settings)
        try:
            states = [ExportState(s) for s in status] or None
            exports = stored_exports.list_exports(store, project, states=states, limit=limit)
            return [export_view(store, e, settings) for e in exports]
        finally:
            store.close()

    views = _run(listing)
    if as_json:
        click.echo(json.dumps([v.to_json() for v in views], indent=2))
        return
    for v in views:
        tables = ",".join(dict.fromkeys(t.table for t in v.tables))  # a split table once
        click.echo(f"{v.id}  {v.status:<9}  {v.rows:>12,} rows  {v.format:<7} {tables}")


def _one(action: str) -> Callable[..., None]:
    def command(home: str | None, project: str, export_id: str, as_json: bool) -> None:
        settings = _settings(home)

        def go() -> ExportView:
            store = open_store(settings)
            try:
                if action == "cancel":
                    export = stored_exports.cancel_export(store, project, export_id)
                elif action == "retry":
                    export = stored_exports.retry_export(store, project, export_id, settings)
                else:
                    export = stored_exports.get_export(store, project, export_id)
                return export_view(store, export, settings)
            finally:
                store.close()

        view = _run(go)
        if as_json:
            click.echo(json.dumps(view.to_json(), indent=2))
        elif action == "show":
            _print_view(view)
        else:
            click.echo(f"{view.id}  {view.status}")

    return command


def _print_view(view: ExportView) -> None:
    click.echo(f"export   {view.id}  ({view.status})")
    click.echo(f"source   {view.source}   format {view.format} / {view.compression}")
    if view.created_by:
        click.echo(f"by       token {view.created_by}")
    for t in view.tables:
        estimate = f"/{t.rows_estimate:,}" if t.rows_estimate else ""
        error = f"  error: {t.error}" if t.error else ""
        click.echo(f"  {t.table:<24} {t.status:<9} {t.rows:,}{estimate} rows{error}")
        if t.key_range:
            r = t.key_range
            click.echo(f"  {'':<24} range {r['range']}/{r['of']} of {r['column']}: "
                       f"({'-inf' if r['lo'] is None else r['lo']}, "
                       f"{'+inf' if r['hi'] is None else r['hi']}]")
        if t.query_id:
            click.echo(f"  {'':<24} query {t.query_id}" + (f"  note: {t.note}" if t.note else ""))
    for f in view.files:
        click.echo(f"  file {f.path}  {f.rows:,} rows  {f.bytes:,} bytes")
    if view.notice:
        click.echo(f"note     {view.notice}")
    if view.error:
        click.echo(f"error    {view.error}")
    if view.error_detail:
        click.echo(f"detail   {view.error_detail}")


for _action, _help in (
    ("show", "Show an export: status, progress per table, files."),
    ("cancel", "Cancel an export (running tasks stop at their next part)."),
    ("retry", "Retry a failed export from its checkpoints."),
):
    jobs.command(_action, help=_help)(
        home_option(project_option(click.argument("export_id")(json_option(_one(_action)))))
    )


@jobs.command("rm")
@home_option
@project_option
@click.argument("export_id")
def jobs_rm(home: str | None, project: str, export_id: str) -> None:
    """Delete an ended export and its files (cancel a running one first)."""
    settings = _settings(home)

    def go() -> None:
        store = open_store(settings)
        try:
            stored_exports.delete_export(store, settings, project, export_id)
        finally:
            store.close()

    _run(go)
    click.echo(f"{export_id}  deleted")


@jobs.command("wait", short_help="Wait until an export ends, with its progress.")
@home_option
@project_option
@click.argument("export_id")
@click.option("--timeout", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Stop waiting after this long, with exit code 124 (the export goes on).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              metavar="SECONDS", help="Seconds between two looks at the job store.")
@click.option("--progress", type=click.Choice(PROGRESS_MODES),
              default="auto", show_default=True,
              help="bar: Rich bars; lines: a plain line per table every 10 s (logs, CI); "
                   "auto: bars on a terminal, lines otherwise.")
@json_option
def jobs_wait(home: str | None, project: str, export_id: str, timeout: float | None,
              interval: float, progress: str, as_json: bool) -> None:
    """Wait until an export ends, showing its progress: exit 0 if it completed, 1 if it
    failed, was cancelled or expired, 124 after --timeout."""
    from egress.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, one_line
    from egress.cli.jobs_wait import EXIT_TIMEOUT, WaitTimeout, wait_for_export

    settings = _settings(home)
    display = make_display(progress)

    def go() -> ExportView:
        store = open_store(settings)
        try:
            with display if display is not None else contextlib.nullcontext():
                return wait_for_export(store, settings, project, export_id, display,
                                       interval=interval, timeout=timeout)
        finally:
            store.close()

    try:
        view = _run(go)
    except WaitTimeout as exc:
        click.echo(f"egress: {exc} after {timeout:g} s; it goes on "
                   f"(egress jobs wait {export_id})", err=True)
        sys.exit(EXIT_TIMEOUT)
    except KeyboardInterrupt:
        click.echo(f"egress: stopped waiting; export {export_id} goes on "
                   f"(egress jobs wait {export_id})", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if as_json:
        click.echo(json.dumps(view.to_json(), indent=2))
    else:
        click.echo(f"{view.id}  {view.status}  {view.rows:,} rows  {len(view.files)} files")
    if view.status != "completed":
        why = view.error or next((t.error for t in view.tables if t.error), None)
        click.echo(f"egress: error: export {view.id} {view.status}"
                   + (f": {one_line(why)}" if why else ""), err=True)
        sys.exit(EXIT_ERROR)

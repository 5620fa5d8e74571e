"""Use cases shared by the CLI, the HTTP API, the web page and the worker.

Nothing here speaks SQL (the store does) or HTTP (the API does): these functions check
a request against the settings and the source's catalog, then call the store. The use
cases on exports already stored (find, list, cancel, retry, delete, their files) are in
``egress.stored_exports``, without this module's imports of the sources and the engine;
they are offered here too.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from egress.catalog_cache import CatalogCache
from egress.config import Settings
from egress.domain.access import AuditEntry
from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.domain.ranges import SEQ_STRIDE, check_split
from egress.engine.copied import check_server_csv
from egress.engine.selection import check_selection
from egress.engine.split import check_split_export, check_splittable, split_asked
from egress.exceptions import ConfigError
from egress.formats import resolve_compression
from egress.formats.csv import DIALECTS as CSV_DIALECTS
from egress.sources import is_remote, open_source, source_kind
from egress.sources.base import Source, TableInfo
from egress.sources.protection import protect
from egress.sources.query import Query, check_query
from egress.sources.snapshots import SNAPSHOT_AND_SERVER_CSV
from egress.store.base import JobStore
from egress.stored_exports import (
    DEFAULT_PROJECT,
    cancel_export,
    check_project,
    delete_export,
    export_id_in,
    export_root,
    get_export,
    list_exports,
    open_sink,
    remove_outputs,
    retry_export,
)

__all__ = [
    "DEFAULT_PROJECT", "EXPORT_OPTIONS", "ExportRequest", "cancel_export", "check_project",
    "check_snapshot_source", "create_export", "create_export_planned", "delete_export",
    "export_id_in", "export_root", "export_source", "format_options_of", "get_export",
    "list_exports", "open_export_source", "open_sink", "remove_outputs", "retry_export",
]

#: Options an export request may carry, with what they mean.
EXPORT_OPTIONS = {
    "role": "remote engines: the role the engine runs the export's queries as (required)",
    "client_tags": "remote engines: client tags sent with the queries (besides egress-export)",
    "mode": "remote engines: direct (egress writes the result) or unload (the engine does)",
    "delimiter": "CSV field delimiter (one character)",
    "csv_dialect": "CSV: egress (RFC 4180, default) or postgres (PostgreSQL's own CSV, "
                   "written by the server; PostgreSQL tables only)",
    "max_file_size": "start a new numbered file above this many bytes",
    "part_size": "target bytes per part",
    "part_rows": "rows per part (overrides part_size)",
    "row_group_size": "Parquet: most bytes of rows (as read) in one row group",
    "select": "per table: the columns to export and filters on rows "
              '({"TABLE": {"columns": [...], "filters": [{"column", "op", "value"}]}})',
    "snapshot": "true: every table read in one consistent snapshot (PostgreSQL sources; "
                "docs/jobs.md, Consistency)",
    "query": 'a read-only query instead of tables: {"sql": "SELECT …", "key": ["id"], '
             '"name": "query"} (the key: unique, NOT NULL result columns)',
    "split": "N (2-64), \"auto\" or false: read each table as N key ranges by as many "
             "workers at once (SQLite, PostgreSQL, DuckDB and MySQL/MariaDB tables; "
             "docs/jobs.md, Splitting a big table)",
    "split_files": "with split: true, each range its own numbered files; false, one file "
                   "per table with the bytes one task would write (tables with a "
                   "one-column key, no filters); absent: one file where that applies",
}


@dataclass(frozen=True)
class ExportRequest:
    source: str
    tables: tuple[str, ...] = ()
    all_tables: bool = False
    format: str = "csv"
    #: None: the format's default (Parquet: zstd inside the files; text formats: none)
    compression: str | None = None
    destination: str = "local"
    options: dict[str, Any] = field(default_factory=dict)
    callback_url: str | None = None

    def fingerprint(self) -> str:
        """A hash of the normalised request: the same body gives the same hash."""
        data = asdict(self)
        data["tables"] = list(self.tables)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def format_options_of(options: dict[str, Any]) -> dict[str, Any]:
    """The format's own options among an export's options."""
    out: dict[str, Any] = {}
    if "delimiter" in options:
        out["delimiter"] = options["delimiter"]
    if options.get("csv_dialect") not in (None, "egress"):
        out["csv_dialect"] = options["csv_dialect"]
    if options.get("row_group_size") is not None:
        out["row_group_bytes"] = options["row_group_size"]
    return out


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(EXPORT_OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown export option(s) {', '.join(unknown)}; allowed: {', '.join(EXPORT_OPTIONS)}"
        )
    for key in ("max_file_size", "part_size", "part_rows", "row_group_size"):
        if key in options and options[key] is not None:
            value = options[key]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"export option {key} must be a positive integer, got {value!r}")
    dialect = options.get("csv_dialect")
    if dialect is not None and dialect not in CSV_DIALECTS:
        raise ConfigError(f"csv_dialect must be one of {', '.join(CSV_DIALECTS)}, "
                          f"got {dialect!r}")
    checked = dict(options)
    if "snapshot" in checked:
        if not isinstance(checked["snapshot"], bool):
            raise ConfigError(f"export option snapshot must be true or false, "
                              f"got {checked['snapshot']!r}")
        if not checked["snapshot"]:
            del checked["snapshot"]  # the default: the same request as without it
    if "split" in checked and checked["split"] is not False:  # false: kept, no split at all
        split = check_split(checked["split"])
        if split is None:
            del checked["split"]  # the default: the same request as without it
        else:
            checked["split"] = split
    if "split_files" in checked:
        if not isinstance(checked["split_files"], bool):
            raise ConfigError(f"export option split_files must be true or false, "
                              f"got {checked['split_files']!r}")
        if not checked.get("split"):
            raise ConfigError("split_files applies to a split export: give split too")
    if checked.get("split_files") is False and checked.get("max_file_size"):
        raise ConfigError("a stitched split (split_files: false) writes one file per table: "
                          "max_file_size needs split_files: true")
    if checked.get("snapshot") and checked.get("csv_dialect") == "postgres":
        raise ConfigError(SNAPSHOT_AND_SERVER_CSV)
    _check_remote_options(checked)
    if "query" in checked:
        wanted = checked["query"] if isinstance(checked["query"], dict) else {}
        if "select" in checked:
            raise ConfigError("columns/filters apply to tables, not to a query: "
                              "select columns and filter rows in the query itself")
        checked["query"] = check_query(wanted.get("sql"), wanted.get("key"),
                                       wanted.get("name")).to_json()
    return checked


_ROLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/-]{0,63}")
REMOTE_OPTIONS = ("role", "client_tags", "mode")


def _check_remote_options(options: dict[str, Any]) -> None:
    role = options.get("role")
    if role is not None and not (isinstance(role, str) and _ROLE.fullmatch(role)):
        raise ConfigError("role must be a role name: letters, digits, _ . @ - (at most 128)")
    tags = options.get("client_tags")
    if tags is not None:
        if (not isinstance(tags, list | tuple) or len(tags) > 20
                or not all(isinstance(t, str) and _TAG.fullmatch(t) for t in tags)):
            raise ConfigError("client_tags must be a list of at most 20 tags, each letters, "
                              "digits and _ . : @ / - (no commas)")
        options["client_tags"] = list(tags)
    mode = options.get("mode")
    if mode is not None and mode not in ("direct", "unload"):
        raise ConfigError(f"mode must be direct or unload, got {mode!r}")


def _check_server_csv(source: Source, fmt: str, infos: list[TableInfo],
                      select: dict[str, Any]) -> None:
    """The postgres CSV dialect: format csv, PostgreSQL tables, no filters, the key kept."""
    if fmt != "csv":
        raise ConfigError(f"csv_dialect applies to format csv only, not {fmt}")
    for info in infos:
        wanted = select.get(info.name) or {}
        columns = list(wanted.get("columns") or info.column_names)
        check_server_csv(source, info, columns, wanted.get("filters") or None)


def _check_select(select: Any, infos: list[TableInfo]) -> dict[str, Any]:
    """Per-table columns and filters, checked against the catalog and normalised."""
    by_name = {info.name: info for info in infos}
    if not isinstance(select, dict):
        raise ConfigError("export option select must map table names to columns/filters")
    checked: dict[str, Any] = {}
    for table, wanted in select.items():
        if table not in by_name:
            raise ConfigError(
                f"columns/filters given for table {table!r}, which is not exported; "
                f"exported tables: {', '.join(by_name)}"
            )
        wanted = wanted if isinstance(wanted, dict) else {}
        unknown = sorted(set(wanted) - {"columns", "filters"})
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} for table {table!r}; "
                              "allowed: columns, filters")
        columns, predicate = check_selection(by_name[table], wanted.get("columns"),
                                             wanted.get("filters"))
        if columns is None and predicate is None:
            continue
        checked[table] = {
            "columns": list(columns) if columns is not None else None,
            "filters": predicate.to_json() if predicate is not None else None,
        }
    return checked


def create_export(store: JobStore, settings: Settings, request: ExportRequest,
                  **how: Any) -> tuple[ExportRecord, bool]:
    """(export, created) of ``create_export_planned``, which takes the same arguments."""
    export, created, _ = create_export_planned(store, settings, request, **how)
    return export, created


def create_export_planned(
    store: JobStore,
    settings: Settings,
    request: ExportRequest,
    *,
    project: str = DEFAULT_PROJECT,
    idempotency_key: str | None = None,
    active_cap: int | None = None,
    created_by: str | None = None,
    audit: AuditEntry | None = None,
    catalog: CatalogCache | None = None,
) -> tuple[ExportRecord, bool, list[TaskRecord] | None]:
    """Check the request against the catalog and queue one task per table.

    ``audit``: an entry stored with the export when it is created (its export id and
    tables are filled in here), in the same transaction. ``catalog``: where to look the
    tables up before asking the source (the API's short-lived cache).

    Returns (export, created, tasks); with an idempotency key already used for the same
    request the existing export comes back with created False and tasks None (they are
    in the store). With ``active_cap`` the project may have at most that many exports
    queued or running (ActiveLimitError).
    """
    check_project(project)
    options = _check_options(request.options)
    unload = options.get("mode") == "unload"
    if unload and (request.format != "parquet"
                   or request.compression not in (None, "none", "snappy")):
        raise ConfigError("mode unload: the engine writes Parquet (Snappy) itself; ask for "
                          "format parquet without compression")
    compression = "snappy" if unload else resolve_compression(request.format,
                                                              request.compression)
    request = replace(request, compression=compression)
    settings.destination(request.destination)
    url = settings.source_url(request.source)
    query = Query.from_json(options["query"]) if "query" in options else None
    if query is not None and (request.tables or request.all_tables):
        raise ConfigError("give either tables or a query, not both")
    remote = is_remote(url)
    given = [k for k in REMOTE_OPTIONS if options.get(k) is not None]
    if given and not remote:
        raise ConfigError(f"{', '.join(given)} apply to remote engines (trino://…) only")
    if options.get("snapshot"):
        check_snapshot_source(url)
    check_split_export(options.get("split"), kind=source_kind(url), query=query is not None,
                       remote=remote, options=options)
    if query is None and not request.all_tables and not request.tables:
        raise ConfigError("name at least one table, or ask for all tables")
    wanted = None if request.all_tables else list(dict.fromkeys(request.tables))
    if catalog is not None and query is None and not remote:
        tables, infos = catalog.lookup(url, wanted, lambda: open_export_source(settings, url))
    else:
        source = open_export_source(settings, url, query)
        if remote:  # the catalog is read as the export's role
            source.role = options.get("role")  # type: ignore[attr-defined]  # remote sources
        try:
            if query is not None:
                tables = [query.name]
            else:
                tables = source.tables() if wanted is None else wanted
            infos = [source.describe(t) for t in tables]
        finally:
            source.close()
    if "select" in options:
        options["select"] = _check_select(options["select"], infos)
        if remote and any(v.get("filters") for v in options["select"].values()):
            raise ConfigError("filters are not supported on a remote engine: export a query "
                              "with a WHERE clause instead")
    if options.get("csv_dialect") == "postgres":
        _check_server_csv(source, request.format, infos, options.get("select") or {})
    asked = split_asked(options, source_kind(url), remote=remote,
                        auto_split=settings.export.auto_split)
    if asked is not None:  # planned by the first worker to claim each table (engine/split.py)
        for info in infos:
            filters = ((options.get("select") or {}).get(info.name) or {}).get("filters")
            check_splittable(info, asked, settings.export.split_rows, filtered=bool(filters))
    # a table's ranges take the seqs right after its task's: room for the most ranges
    stride = SEQ_STRIDE if asked is not None else 1
    export_id = new_id("exp")
    export = ExportRecord(
        id=export_id,
        project=project,
        source=request.source,
        tables=tuple(tables),
        format=request.format,
        compression=compression,
        destination=request.destination,
        state=ExportState.QUEUED,
        options=options,
        idempotency_key=idempotency_key,
        request_hash=request.fingerprint(),
        callback_url=request.callback_url,
        created_by=created_by,
        max_duration=settings.export.max_duration,
    )
    tasks = [
        TaskRecord(
            id=new_id("tsk"),
            export_id=export_id,
            project=project,
            table=info.name,
            seq=i * stride,
            state=TaskState.QUEUED,
            rows_estimate=info.row_estimate,
            max_attempts=settings.worker.max_attempts,
            remote_mode=(options.get("mode") or "direct") if remote else None,
        )
        for i, info in enumerate(infos)
    ]
    if audit is not None:
        audit = replace(audit, export_id=export_id,
                        details={**audit.details, "tables": list(tables)})
    stored, created = store.export_create(export, tasks, active_cap=active_cap, audit=audit)
    return stored, created, tasks if created else None


def check_snapshot_source(url: str) -> None:
    """Refuse ``snapshot: true`` for a job whose source cannot share one snapshot among
    its tasks and workers (only PostgreSQL exports one: docs/jobs.md, "Consistency")."""
    kind = source_kind(url)
    if kind in ("postgresql", "postgres"):
        return
    also = (" (a SQLite database is read in one snapshot by a one-shot "
            "'egress export --snapshot', which holds one read transaction for the run)"
            if kind == "sqlite" else "")
    raise ConfigError(f"snapshot: true needs a PostgreSQL source for a job; this source is "
                      f"{kind}, whose workers cannot share one snapshot{also}")


def open_export_source(settings: Settings, url: str, query: Query | None = None) -> Source:
    """The source an export reads: the database at ``url``, or ``query`` on it."""
    return open_source(url, query, settings.export.query_timeout_seconds)


def export_source(settings: Settings, export: ExportRecord) -> Source:
    """The source of a stored export (its query, if it is a query export), read within
    the limits of the configured source it names (sources/protection.py)."""
    query = export.options.get("query")
    url = settings.source_url(export.source)
    source = open_export_source(settings, url, Query.from_json(query) if query else None)
    if export.options.get("snapshot"):
        if export.snapshot_id is None or not hasattr(source, "use_snapshot"):
            source.close()
            raise ConfigError(f"export {export.id} reads a snapshot, and none is recorded "
                              "for this source")  # the runner waits for it (a bug otherwise)
        source.use_snapshot(export.snapshot_id, export.snapshot_owner)
    limits = settings.limits_of(export.source)
    if query is not None or is_remote(url):  # a query has its own per-page timeout
        limits = replace(limits, statement_timeout_seconds=0.0)
    try:
        return protect(source, limits)
    except BaseException:
        source.close()
        raise

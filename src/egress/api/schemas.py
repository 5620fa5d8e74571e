"""Request (Create) and response (Public) models of the HTTP API.

Requests forbid unknown fields, so a misspelt option is an error, not ignored. Names
(sources, destinations, tables, columns) are checked against the configuration and the
catalog by the use cases; the models only fix shapes and bounds.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Format = Literal["csv", "jsonl", "json", "sql", "parquet"]
Compression = Literal["none", "gzip", "zstd", "snappy"]
Operator = Literal["=", "!=", "<", "<=", ">", ">=", "in", "is_null", "not_null"]
#: The store's states, which a listing can filter by.
StateFilter = Literal["queued", "running", "completed", "failed", "cancelled"]
#: What an export shows: its state, or "expired" for a completed export whose files were
#: removed after the retention period (listed under "completed").
Status = Literal["queued", "running", "completed", "failed", "cancelled", "expired"]
Scalar = str | int | float | bool
KeyColumn = Annotated[str, Field(min_length=1, max_length=256)]


def _lone_surrogate(value: Any, path: str) -> str | None:
    """Where ``value`` holds a string that is not valid Unicode text (JSON's ``"\\ud800"``
    decodes to one, and nothing downstream can encode it)."""
    if isinstance(value, str):
        for char in value:
            if 0xD800 <= ord(char) <= 0xDFFF:
                return f"{path} holds a lone surrogate (U+{ord(char):04X}), not valid text"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _lone_surrogate(key, path) or _lone_surrogate(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found:
                return found
    return None


class _Request(BaseModel):
    # strict: `true` is not a size and "yes" is not a boolean (no loose conversion)
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        found = _lone_surrogate(data, "body")
        if found:
            raise ValueError(found)
        return data


class Filter(_Request):
    """One condition on a column; every filter of a table must hold (AND)."""

    column: str = Field(min_length=1, max_length=256)
    op: Operator = Field(description="=, !=, <, <=, >, >=, in (value is a list), "
                                     "is_null and not_null (no value)")
    value: Scalar | list[Scalar] | None = Field(
        default=None, description="Bound as a parameter, never written into SQL.")


class TableRequest(_Request):
    """A table with a column subset and/or filters."""

    name: str = Field(min_length=1, max_length=512)
    columns: list[str] | None = Field(
        default=None, min_length=1, max_length=1000,
        description="Output columns in this order (default: all).")
    filters: list[Filter] | None = Field(default=None, max_length=32)


class ExportCreate(_Request):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"source": "main", "tables": ["events"], "format": "csv", "compression": "gzip"},
        {"source": "main", "format": "parquet", "tables": [
            {"name": "events", "columns": ["id", "kind"],
             "filters": [{"column": "kind", "op": "in", "value": ["buy", "view"]}]}]},
        {"source": "main", "format": "jsonl", "name": "paid_orders", "key": ["id"],
         "query": "SELECT o.id, o.total, c.email FROM orders o JOIN customers c "
                  "ON c.id = o.customer_id WHERE o.status = 'paid'"},
    ]})

    source: str = Field(min_length=1, max_length=128,
                        description="Name of a configured source (see GET /v1/sources); "
                                    "never a URL.")
    tables: list[str | TableRequest] | None = Field(
        default=None, max_length=1000,
        description="Table names, or objects with a name, columns and filters.")
    all: bool = Field(default=False, description="Every table of the source.")
    query: str | None = Field(
        default=None, min_length=1, max_length=100_000,
        description="One read-only SQL query (SELECT, WITH … SELECT, VALUES) instead of "
                    "tables; needs the scope exports:query and `key`. Runs read-only, "
                    "with a statement timeout.")
    key: list[KeyColumn] | None = Field(
        default=None, min_length=1, max_length=16,
        description="With `query`: the result columns that are unique and NOT NULL; the "
                    "result is paged and resumed in this order (never OFFSET).")
    name: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="With `query`: the output's name (default `query`: query.csv, …).")
    format: Format = "csv"
    compression: Compression | None = Field(
        default=None, description="none, gzip or zstd; Parquet compresses inside its files "
                                  "(none, snappy, gzip, zstd; default zstd). Default: none, "
                                  "but zstd for Parquet.")
    destination: str = Field(default="local", min_length=1, max_length=128,
                             description="Name of a configured destination.")
    max_file_size: int | None = Field(
        default=None, ge=1, le=2**62, description="Start a new numbered file above this "
                                                  "many bytes.")
    row_group_size: int | None = Field(
        default=None, ge=1, le=2**40, description="Parquet: most bytes of rows (as read) in "
                                                  "one row group (default 16 MiB; 8 MiB "
                                                  "uncompressed).")
    split: Annotated[int, Field(ge=2, le=64)] | Literal["auto"] | bool | None = Field(
        default=None,
        description="Read each table as N key ranges (2-64) by as many workers at once, or "
                    "`auto`: one range per `split_rows` estimated rows (setting, default "
                    "10M; smaller tables stay whole). The table's file is the bytes one task "
                    "would write, or each range's own files (`split_files`). SQLite, "
                    "PostgreSQL, DuckDB and MySQL/MariaDB tables only; not with a query. "
                    "`false`: one task per table, never split. Default: a table above "
                    "`split_rows` whose single file a split can write byte for byte "
                    "(a one-column key, no filters) is split `auto` (setting "
                    "`auto_split`); every "
                    "other table is one task (docs/jobs.md, Splitting a big table).")
    split_files: bool | None = Field(
        default=None,
        description="With `split`: `false` writes each table as ONE file, byte-identical to "
                    "what one task writes (the ranges' parts joined in key order when the "
                    "last range is done; tables with a one-column key, "
                    "no filters, no `max_file_size`; refused otherwise); `true` writes each "
                    "range's own numbered files (events.r01-00001.csv…). Default: one file "
                    "where that applies, range files elsewhere (docs/jobs.md).")
    snapshot: bool = Field(
        default=False,
        description="Read every table in one consistent snapshot (PostgreSQL sources): "
                    "rows changed while the export runs do not appear, and all tables agree "
                    "at one point in time. Without it, each page is read as it is when it "
                    "is read (docs/jobs.md, Consistency).")
    callback_url: str | None = Field(
        default=None, max_length=2048,
        description="Webhook URL notified when the export ends (https).")
    role: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$",
        description="Remote engines (Trino): the role the engine runs the export as "
                    "(X-Trino-Role). Required for them: without it the export fails.")
    client_tags: list[str] | None = Field(
        default=None, max_length=20,
        description="Remote engines: client tags sent with the export's queries "
                    "(X-Trino-Client-Tags), besides egress-export.")
    mode: Literal["direct", "unload"] | None = Field(
        default=None,
        description="Remote engines: `direct` (default; egress writes the result) or "
                    "`unload` (Starburst's system.unload writes Parquet itself).")


class KeyRangePublic(BaseModel):
    """A range task of a split table: the rows whose first key column is in (lo, hi]."""

    range: int = Field(description="Its place among the table's ranges, from 1, in key order.")
    of: int = Field(description="How many ranges the table was split into.")
    column: str = Field(description="The key column the ranges are taken on.")
    lo: Any = Field(description="Rows above this value (null: from the first row).")
    hi: Any = Field(description="Rows up to and including this value (null: to the last).")


class PlannedTable(BaseModel):
    name: str
    estimated_rows: int | None = Field(
        description="The catalog's row estimate (an upper bound with filters; null for a "
                    "query on SQLite).")
    key_range: KeyRangePublic | None = Field(
        default=None, description="Always null here: a split table's ranges are planned "
                                  "by the first worker to claim it, and listed by GET "
                                  "/v1/exports/{id} (one entry per range, in key order).")


class ExportCreated(BaseModel):
    id: str
    status: Status
    status_url: str
    events_url: str
    tables: list[PlannedTable] = Field(description="What will be exported, in order.")


class TableProgress(BaseModel):
    table: str
    status: str
    rows: int
    rows_estimate: int | None
    bytes: int
    attempts: int = Field(description="Failures since the table last made progress (it "
                                       "fails at the worker's max_attempts).")
    failures: int = Field(default=0, description="Every failure of the table, retried or not.")
    error: str | None = Field(description="The last error, in plain words.")
    query_id: str | None = Field(default=None, description="Remote engines (Trino): the "
                                 "engine's id of the table's query.")
    note: str | None = Field(default=None, description="Remote engines: what happened that "
                             "you should know (the table started over after its result was "
                             "lost on the engine; an unload done directly).")
    key_range: KeyRangePublic | None = Field(
        default=None, description="`split`: the key range of this task of the table "
                                  "(one entry per range, in key order).")


class FilePublic(BaseModel):
    table: str
    name: str
    rows: int
    bytes: int
    crc32c: str | None = Field(description="CRC32C of the whole file, 8 hex digits "
                               "(none for a file a remote engine wrote itself).")
    sha256: str | None = Field(description="SHA-256 (hex) of the file as stored.")
    download_url: str


class ExportSummary(BaseModel):
    id: str
    project: str
    status: Status
    source: str
    format: str
    compression: str
    destination: str
    tables: list[TableProgress]
    rows: int
    rows_estimate: int | None = Field(description="Sum of the tables' estimates, if known.")
    bytes: int
    rate: float | None = Field(description="Rows per second since the export started.")
    eta_seconds: float | None = Field(description="Estimated seconds left, if known.")
    created_by: str | None = Field(
        default=None, description="The id of the API token that created it (null: the CLI "
                                  "or the library).")
    attempts: int = Field(description="Failures without progress of all tables together.")
    failures: int = Field(default=0, description="Every failure of all tables together.")
    notice: str | None = Field(
        default=None, description="While it runs: which tables were retried, how often, and "
                                  "the last error, in plain words.")
    error: str | None = Field(description="Why it failed: a plain message (what failed, what "
                                          "to do) without hosts, paths or driver text.")
    error_detail: str | None = Field(
        default=None, description="The failure's detail (credentials masked); only for "
                                  "tokens with the admin scope, else null.")
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    status_url: str
    events_url: str


class ExportPublic(ExportSummary):
    files: list[FilePublic]


class ExportPage(BaseModel):
    items: list[ExportSummary]
    next_before: str | None = Field(
        description="Pass as `before` for the next (older) page; null on the last page.")


class LinkCreate(_Request):
    file: str = Field(min_length=1, max_length=1024,
                      description="A file name from the export's `files`.")
    expires_in: int | None = Field(
        default=None, ge=1, le=7 * 24 * 3600,
        description="Seconds the link stays valid (default api.link_default_seconds).")


class LinkPublic(BaseModel):
    url: str = Field(description="Works without a token until it expires; keep it secret.")
    file: str
    expires_at: dt.datetime


class SourcePublic(BaseModel):
    name: str
    kind: str


class ColumnPublic(BaseModel):
    name: str
    type: str = Field(description="The Arrow type egress exports it as.")
    source_type: str
    nullable: bool


class TablePublic(BaseModel):
    name: str
    columns: list[ColumnPublic]
    key_columns: list[str]
    row_estimate: int | None
    exportable: bool = Field(description="False when egress cannot read the table "
                                         "(no usable key, no permission): see `reason`.")
    reason: str | None = None


class TableEstimate(BaseModel):
    table: str
    rows: int | None
    bytes: int | None


class EstimatePublic(BaseModel):
    tables: list[TableEstimate]
    rows: int | None = Field(description="Rows of the whole export (an upper bound with "
                                         "filters); null if a table has no estimate.")
    bytes: int | None = Field(description="Bytes of the output, extrapolated from a sample.")
    seconds: float | None = Field(description="Rough duration: rows / rows_per_second.")
    rows_per_second: float = Field(
        description="The throughput assumed: measured on this installation's recent "
                    "completed exports of the same source kind and format, else a default.")
    rate_basis: Literal["measured", "default"]


class Health(BaseModel):
    status: str
    detail: str | None = None

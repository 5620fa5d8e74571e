"""Request (Create) and response (Public) models of the HTTP API.

Requests forbid unknown fields, so a misspelt option is an error, not ignored. They are
strict: a value of the wrong JSON type is an error (``"all": "yes"`` is not true,
``"max_file_size": true`` is not 1), and every string must be valid Unicode (JSON's
``"\\ud800"`` escape decodes to a lone surrogate, which no store or driver can encode).
Names (sources, destinations, tables, columns) are checked against the configuration and
the catalog by the use cases; the models only fix shapes and bounds.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Format = Literal["csv", "jsonl", "json", "sql", "parquet"]
Compression = Literal["none", "gzip", "zstd"]
Operator = Literal["=", "!=", "<", "<=", ">", ">=", "in", "is_null", "not_null"]
#: The store's states, which a listing can filter by.
StateFilter = Literal["queued", "running", "completed", "failed", "cancelled"]
#: What an export shows: its state, or "expired" for a completed export whose files were
#: removed after the retention period (listed under "completed").
Status = Literal["queued", "running", "completed", "failed", "cancelled", "expired"]
Scalar = str | int | float | bool
KeyColumn = Annotated[str, Field(min_length=1, max_length=256)]


def _valid_unicode(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the string holds a lone surrogate (a \\ud800-\\udfff escape "
                             "not in a pair), which is not text; send valid Unicode") from None
    elif isinstance(value, list):
        for item in value:
            _valid_unicode(item)
    return value


class _Request(BaseModel):
    # strict: JSON types as documented, no conversion of "yes", 1.0 or "5"
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _unicode(cls, value: Any) -> Any:
        return _valid_unicode(value)


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
    compression: Compression = "none"
    destination: str = Field(default="local", min_length=1, max_length=128,
                             description="Name of a configured destination.")
    max_file_size: int | None = Field(
        default=None, ge=1, le=2**62, description="Start a new numbered file above this "
                                                  "many bytes.")
    callback_url: str | None = Field(
        default=None, max_length=2048,
        description="Webhook URL notified when the export ends (https).")


class ExportCreated(BaseModel):
    id: str
    status: Status
    status_url: str
    events_url: str


class TableProgress(BaseModel):
    table: str
    status: str
    rows: int
    rows_estimate: int | None
    bytes: int
    attempts: int
    error: str | None


class FilePublic(BaseModel):
    table: str
    name: str
    rows: int
    bytes: int
    crc32c: str = Field(description="CRC32C of the whole file, 8 hex digits.")
    sha256: str | None = Field(description="SHA-256 (hex); null for S3 destinations.")
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
    attempts: int = Field(description="Attempts of all tables together.")
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
    seconds: float | None = Field(description="Rough duration at the server's assumed rate.")


class Health(BaseModel):
    status: str
    detail: str | None = None

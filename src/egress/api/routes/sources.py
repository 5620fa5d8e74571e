"""``/v1/sources``: the configured sources (names and kinds, never URLs) and their tables
(columns, types, keys, row estimates)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from egress.api.deps import SettingsDep, require_scope
from egress.api.errors import COMMON_ERRORS, problem_doc
from egress.api.routes.exports import check_source_name
from egress.api.schemas import ColumnPublic, SourcePublic, TablePublic
from egress.exceptions import SourceError, SourceUnavailableError
from egress.sources import open_source, source_kind
from egress.sources.base import TableInfo

router = APIRouter(tags=["sources"], responses=COMMON_ERRORS)


def table_public(info: TableInfo) -> TablePublic:
    hidden = set(info.hidden_columns)
    return TablePublic(
        name=info.name,
        columns=[ColumnPublic(name=c.name, type=str(c.arrow_type), source_type=c.source_type,
                              nullable=c.nullable) for c in info.columns],
        # egress's own cursor columns (SQLite rowid) are not the user's
        key_columns=[k for k in info.key_columns if k not in hidden] or list(info.primary_key),
        row_estimate=info.row_estimate,
        exportable=True,
    )


@router.get("/v1/sources", summary="Configured sources",
            dependencies=[Depends(require_scope("exports:read"))])
def list_sources(settings: SettingsDep) -> list[SourcePublic]:
    return [SourcePublic(name=name, kind=source_kind(url))
            for name, url in sorted(settings.sources.items())]


@router.get(
    "/v1/sources/{name}/tables",
    summary="Tables of a source: columns, types, keys, row estimates",
    dependencies=[Depends(require_scope("exports:read"))],
    responses={404: problem_doc("No such source")},
)
def list_tables(name: str, settings: SettingsDep) -> list[TablePublic]:
    check_source_name(settings, name)
    source = open_source(settings.sources[name])
    try:
        out = []
        for table in source.tables():
            try:
                out.append(table_public(source.describe(table)))
            except SourceUnavailableError:
                raise
            except SourceError as exc:  # listed, with why it cannot be exported
                out.append(TablePublic(name=table, columns=[], key_columns=[],
                                       row_estimate=None, exportable=False, reason=str(exc)))
        return out
    finally:
        source.close()

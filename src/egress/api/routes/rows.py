"""``GET /v1/sources/{name}/tables/{table}/rows``: a small table streamed in the response.

The rows are read in key order by keyset pages and encoded by the export formats, so
the body is what an export to a single file would hold. Tables estimated above
``api.sync_max_rows`` are refused with 422 pointing to ``POST /v1/exports``: a long
export belongs in the background, where it is checkpointed and resumable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import StreamingResponse

from egress.api.auth import audit
from egress.api.deps import PrincipalDep, SettingsDep, require_scope
from egress.api.errors import COMMON_ERRORS
from egress.api.routes.exports import check_source_name
from egress.domain.filenames import safe_base_name
from egress.engine.plan import format_options
from egress.engine.selection import check_selection, selected_schema
from egress.exceptions import ConfigError
from egress.formats import make_format
from egress.sources import open_source
from egress.sources.base import Source, TableInfo

router = APIRouter(tags=["sources"], responses=COMMON_ERRORS)

#: Rows read per keyset page (and encoded per chunk of the response).
PAGE_ROWS = 10_000
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


def stream_rows(
    source: Source, info: TableInfo, fmt_name: str, columns: tuple[str, ...] | None
) -> Iterator[bytes]:
    """The table encoded in ``fmt_name``; closes ``source`` when done (or abandoned)."""
    try:
        fmt = make_format(fmt_name, format_options(fmt_name, source, info, "none", {}))
        schema = selected_schema(info, columns)
        yield fmt.header(schema)
        after, total = None, 0
        while True:
            encoder = fmt.part_encoder(schema, total)
            got = 0
            for batch in source.read(info, after, PAGE_ROWS):
                encoder.add(batch.select(schema.names))
                got += batch.num_rows
                after = tuple(batch.column(k)[-1].as_py() for k in info.key_columns)
            if data := encoder.finish():
                yield data
            total += got
            if got < PAGE_ROWS:
                break
        yield fmt.footer(schema, total)
    finally:
        source.close()


@router.get(
    "/v1/sources/{name}/tables/{table}/rows",
    summary="Stream a small table (CSV or JSON lines) in the response",
    response_class=StreamingResponse,
    dependencies=[Depends(require_scope("exports:create"))],
    responses={200: {"description": "The rows, in key order",
                     "content": {"text/csv": {"schema": {"type": "string"}},
                                 "application/x-ndjson": {"schema": {"type": "string"}}}}},
)
def table_rows(
    name: str,
    table: str,
    request: Request,
    principal: PrincipalDep,
    settings: SettingsDep,
    format: Annotated[Literal["csv", "jsonl"], Query()] = "csv",
    columns: Annotated[list[str] | None, Query(max_length=1000,
                                                description="Output columns (repeat)")] = None,
) -> StreamingResponse:
    check_source_name(settings, name)
    source = open_source(settings.sources[name])
    try:
        info = source.describe(table)
        limit = settings.api.sync_max_rows
        if info.row_estimate is None or info.row_estimate > limit:
            size = "an unknown number of" if info.row_estimate is None else \
                f"about {info.row_estimate:,}"
            raise ConfigError(
                f"table {table!r} has {size} rows; this endpoint streams tables of at most "
                f"{limit:,} rows (api.sync_max_rows): create an export with POST /v1/exports"
            )
        picked, _ = check_selection(info, columns)
        audit(request, principal, "rows.download", source=name, table=table, format=format)
    except BaseException:
        source.close()
        raise
    filename = f"{safe_base_name(table)}.{format}"
    return StreamingResponse(
        stream_rows(source, info, format, picked),
        media_type=MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )

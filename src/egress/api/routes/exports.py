"""``/v1/exports``: create (202, Idempotency-Key), list, show, cancel, retry, delete, and
``POST /v1/exports:estimate`` (a dry run). Every read and write is scoped by the caller's
project; another project's export answers 404 like a missing one."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Query, Request, Response

from egress import manager
from egress.api.auth import audit, audit_entry, check_scope
from egress.api.deps import PrincipalDep, SettingsDep, StoreDep, require_scope
from egress.api.errors import (
    BODY_ERRORS,
    COMMON_ERRORS,
    NOT_FOUND,
    TooManyRequests,
    problem_doc,
)
from egress.api.schemas import (
    EstimatePublic,
    ExportCreate,
    ExportCreated,
    ExportPage,
    ExportPublic,
    KeyRangePublic,
    PlannedTable,
    StateFilter,
    TableEstimate,
)
from egress.api.views import events_url, export_public, export_summaries, status_url
from egress.config import Settings
from egress.domain.access import Principal
from egress.domain.jobs import ExportState
from egress.domain.ranges import KeyRange
from egress.estimate import estimate_export
from egress.exceptions import ActiveLimitError, ConfigError
from egress.sources.query import Query as SqlQuery
from egress.sources.query import check_query
from egress.store.base import JobStore

router = APIRouter(tags=["exports"], responses=COMMON_ERRORS)

#: Seconds a client at the per-project limit is told to wait before trying again.
ACTIVE_LIMIT_RETRY_AFTER = 30
IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
           description="The same key with the same body returns the same export (200); "
                       "with another body: 409."),
]


def check_source_name(settings: Settings, name: str) -> str:
    """API callers name configured sources only: a URL (with credentials) never comes
    from the outside."""
    if name not in settings.sources:
        known = ", ".join(sorted(settings.sources)) or "none configured"
        raise ConfigError(f"unknown source {name!r}; configured sources: {known} "
                          "(API callers name a configured source, never a URL)")
    return name


def _selection(body: ExportCreate) -> tuple[list[str], dict[str, Any]]:
    """Table names and the per-table columns/filters of a request."""
    if body.key is not None or body.name is not None:
        raise ConfigError("`key` and `name` go with `query`; a table export pages by the "
                          "table's primary key and names files after the table")
    if body.all and body.tables:
        raise ConfigError("give either `tables` or `all: true`, not both")
    if not body.all and not body.tables:
        raise ConfigError("name at least one table in `tables`, or set `all: true`")
    names: list[str] = []
    select: dict[str, Any] = {}
    for item in body.tables or []:
        if isinstance(item, str):
            name, wanted = item, None
        else:
            name = item.name
            wanted = {
                "columns": item.columns,
                "filters": [f.model_dump() for f in item.filters] if item.filters else None,
            }
            if not item.columns and not item.filters:
                wanted = None
        if name in names and select.get(name) != wanted:
            raise ConfigError(f"table {name!r} is listed twice with different columns/filters")
        names.append(name)
        if wanted is not None:
            select[name] = wanted
    return names, select


def _query_option(body: ExportCreate) -> dict[str, Any]:
    """The checked query of a request that has one (scope checked by the caller)."""
    if body.tables or body.all:
        raise ConfigError("give either `query` or `tables`/`all`, not both; columns and "
                          "filters belong to tables: with a query, pick columns and filter "
                          "rows in the query itself")
    return check_query(body.query, body.key, body.name).to_json()


def _key_range(data: dict[str, Any] | None) -> KeyRangePublic | None:
    key_range = KeyRange.from_json(data)
    return KeyRangePublic(**key_range.public()) if key_range is not None else None


def export_request(body: ExportCreate, settings: Settings) -> manager.ExportRequest:
    check_source_name(settings, body.source)
    options: dict[str, Any] = {}
    if body.query is not None:
        names: list[str] = []
        select: dict[str, Any] = {}
        options["query"] = _query_option(body)
    else:
        names, select = _selection(body)
    if body.max_file_size is not None:
        options["max_file_size"] = body.max_file_size
    if body.row_group_size is not None:
        if body.format != "parquet":
            raise ConfigError(f"row_group_size applies to format parquet only, not {body.format}")
        options["row_group_size"] = body.row_group_size
    if select:
        options["select"] = select
    if body.snapshot:
        options["snapshot"] = True
    if body.split is not None:
        options["split"] = body.split  # checked by the manager (True is refused there)
    if body.split_files is not None:
        options["split_files"] = body.split_files  # checked by the manager
    for key in ("role", "client_tags", "mode"):
        if getattr(body, key) is not None:
            options[key] = getattr(body, key)
    if body.callback_url is not None:
        from egress.webhooks.guard import check_callback_url  # the webhooks package

        check_callback_url(body.callback_url, settings)
    return manager.ExportRequest(
        source=body.source, tables=tuple(names), all_tables=body.all, format=body.format,
        compression=body.compression, destination=body.destination, options=options,
        callback_url=body.callback_url,
    )


def _active_limit(project: str, cap: int) -> TooManyRequests:
    return TooManyRequests(
        f"project {project!r} has {cap} exports queued or running, the most allowed "
        "(api.max_active_exports); wait for one to finish or cancel one",
        retry_after=ACTIVE_LIMIT_RETRY_AFTER,
    )


@router.post(
    "/v1/exports",
    status_code=202,
    summary="Create an export (answers at once; the work runs in the background)",
    dependencies=[Depends(require_scope("exports:create"))],
    responses={200: {"model": ExportCreated,
                     "description": "The export made earlier with the same Idempotency-Key"},
               409: problem_doc("The Idempotency-Key was used with another request"),
               **BODY_ERRORS},
)
def create_export(
    body: ExportCreate,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    store: StoreDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> ExportCreated:
    if body.query is not None:
        check_scope(principal, "exports:query")
    req = export_request(body, settings)
    # the cap is checked by the store, in the transaction that inserts the export (the
    # catalog check before it reads the API's cache, not the source, most of the time)
    cap = settings.api.max_active_exports
    # of a query, the audit log keeps its SHA-256 and length, never the text
    query = req.options.get("query")
    digest = SqlQuery.from_json(query).digest() if query else {}
    # written with the export, in its transaction (export id and tables filled in there)
    entry = audit_entry(request, principal, "export.create", source=req.source,
                        format=req.format, **digest)
    try:
        export, created, tasks = manager.create_export_planned(
            store, settings, req, project=principal.project,
            idempotency_key=idempotency_key, active_cap=cap, created_by=principal.token_id,
            audit=entry, catalog=request.app.state.catalog)
    except ActiveLimitError as exc:
        raise _active_limit(principal.project, cap) from exc
    if not created:  # an earlier export, the same Idempotency-Key and body
        response.status_code = 200
    if tasks is None:
        tasks = store.task_list(export.id)
    planned = [PlannedTable(name=t.table, estimated_rows=t.rows_estimate,
                            key_range=_key_range(t.key_range)) for t in tasks]
    return ExportCreated(id=export.id, status=str(export.state),  # type: ignore[arg-type]  # a Status
                         status_url=status_url(export.id), events_url=events_url(export.id),
                         tables=planned)


@router.post(
    "/v1/exports:estimate",
    summary="Estimate rows, bytes and time of an export without creating it",
    dependencies=[Depends(require_scope("exports:read"))],
    responses=BODY_ERRORS,
)
def estimate(body: ExportCreate, principal: PrincipalDep, settings: SettingsDep,
             store: StoreDep) -> EstimatePublic:
    check_source_name(settings, body.source)
    query = None
    if body.query is not None:
        check_scope(principal, "exports:query")
        query = SqlQuery.from_json(_query_option(body))
        names: list[str] = []
        select: dict[str, Any] = {}
    else:
        names, select = _selection(body)
    result = estimate_export(settings, body.source, names, all_tables=body.all,
                             format=body.format, compression=body.compression, select=select,
                             query=query, store=store)
    return EstimatePublic(
        tables=[TableEstimate(table=t.table, rows=t.rows, bytes=t.bytes) for t in result.tables],
        rows=result.rows, bytes=result.bytes, seconds=result.seconds,
        rows_per_second=round(result.rows_per_second, 1), rate_basis=result.rate_basis,
    )


@router.get(
    "/v1/exports",
    summary="List the project's exports, newest first",
    dependencies=[Depends(require_scope("exports:read"))],
)
def list_exports(
    principal: PrincipalDep,
    store: StoreDep,
    status: Annotated[list[StateFilter] | None, Query(
        description="Only these states (expired exports are listed as completed).")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(min_length=1, max_length=64, pattern=r"^[a-z]+_[0-9a-f]+$",
                                        description="Cursor: `next_before` of a page.")] = None,
) -> ExportPage:
    states = [ExportState(s) for s in status] if status else None
    exports = manager.list_exports(store, principal.project, states=states, limit=limit,
                                   before_id=before)
    items = export_summaries(store, exports, admin="admin" in principal.scopes)
    return ExportPage(items=items,
                      next_before=exports[-1].id if len(exports) == limit else None)


@router.get(
    "/v1/exports/{export_id}",
    summary="An export: status, progress per table, rate, ETA, files",
    dependencies=[Depends(require_scope("exports:read"))],
    responses=NOT_FOUND,
)
async def show_export(export_id: str, principal: PrincipalDep, store: StoreDep,
                      settings: SettingsDep) -> ExportPublic:
    # async, the reads in one worker thread: FastAPI would run a plain def and then the
    # validation of its answer in the thread pool, two hand-offs per status poll
    return await anyio.to_thread.run_sync(_show_export, store, settings, principal, export_id)


def _show_export(store: JobStore, settings: Settings, principal: Principal, export_id: str
                 ) -> ExportPublic:
    export = manager.get_export(store, principal.project, export_id)
    return export_public(store, settings, export, admin="admin" in principal.scopes)


@router.post(
    "/v1/exports/{export_id}/cancel",
    summary="Cancel an export (running tables stop after the part in hand)",
    dependencies=[Depends(require_scope("exports:cancel"))],
    responses=NOT_FOUND,
)
def cancel_export(export_id: str, request: Request, principal: PrincipalDep, store: StoreDep,
                  settings: SettingsDep) -> ExportPublic:
    export = manager.cancel_export(store, principal.project, export_id)
    audit(request, principal, "export.cancel", export_id=export.id)
    return export_public(store, settings, export)


@router.post(
    "/v1/exports/{export_id}/retry",
    summary="Retry a failed export from its checkpoints",
    dependencies=[Depends(require_scope("exports:create"))],
    responses=NOT_FOUND,
)
def retry_export(export_id: str, request: Request, principal: PrincipalDep, store: StoreDep,
                 settings: SettingsDep) -> ExportPublic:
    export = manager.retry_export(store, principal.project, export_id, settings)
    audit(request, principal, "export.retry", export_id=export.id)
    return export_public(store, settings, export)


@router.delete(
    "/v1/exports/{export_id}",
    status_code=204,
    summary="Delete a finished export and its files",
    dependencies=[Depends(require_scope("exports:cancel"))],
    responses=NOT_FOUND,
)
def delete_export(export_id: str, request: Request, principal: PrincipalDep, store: StoreDep,
                  settings: SettingsDep) -> Response:
    manager.delete_export(store, settings, principal.project, export_id)
    audit(request, principal, "export.delete", export_id=export_id)
    return Response(status_code=204)

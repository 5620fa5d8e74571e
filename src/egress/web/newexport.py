"""The new-export page: a source, tables from its catalog (with row estimates), columns,
format, compression, destination and file size; "Estimate" shows the API's dry run,
"Start export" creates it. The form is checked by the API's own request model and use
cases; each error is shown next to the field it concerns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, get_args

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from egress.api.routes import exports as export_routes
from egress.api.routes import sources as source_routes
from egress.api.schemas import Compression, ExportCreate, Format
from egress.domain.access import Principal
from egress.exceptions import EgressError
from egress.web.guard import WebPrincipal, WebRoute, needs, problem_of, read_form
from egress.web.render import page

router = APIRouter(route_class=WebRoute, include_in_schema=False)

MIB = 1024 * 1024
#: Which field an error message of the API concerns, by the words it uses (first match).
_FIELD_WORDS = (
    ("snapshot", ("snapshot",)),
    ("max_file_size", ("max_file_size", "file size")),
    ("callback_url", ("callback", "webhook", "url")),
    ("destination", ("destination",)),
    ("source", ("source",)),
    ("compression", ("compression",)),
    ("format", ("format",)),
    ("tables", ("table", "column", "filter", "`all`")),
)


@dataclass
class NewExportForm:
    """What the user entered, kept to show the form again as it was."""

    source: str = ""
    tables: list[str] = field(default_factory=list)
    #: per table: the columns picked, when not all of them
    columns: dict[str, list[str]] = field(default_factory=dict)
    format: str = "csv"
    #: empty: the format's default (zstd inside Parquet files, none for text)
    compression: str = ""
    destination: str = "local"
    max_file_mib: str = ""
    callback_url: str = ""
    #: read every table in one consistent snapshot (PostgreSQL sources)
    snapshot: bool = False


def parse_form(data: dict[str, list[str]]) -> tuple[NewExportForm, dict[str, str]]:
    """The form's values, and errors of fields that cannot be read at all."""
    def one(name: str, default: str = "") -> str:
        return (data.get(name) or [default])[0].strip()

    form = NewExportForm(source=one("source"), tables=data.get("table", []),
                         format=one("format", "csv"), compression=one("compression"),
                         destination=one("destination", "local"),
                         max_file_mib=one("max_file_mib"), callback_url=one("callback_url"),
                         snapshot=one("snapshot") == "on")
    errors: dict[str, str] = {}
    for table in form.tables:
        picked = data.get(f"columns:{table}", [])
        total = one(f"ncolumns:{table}", "0")
        if not picked:
            errors["tables"] = f"table {table!r}: pick at least one column"
        elif total.isdigit() and len(picked) < int(total):
            form.columns[table] = picked
    if form.max_file_mib and not (form.max_file_mib.isdigit() and int(form.max_file_mib) > 0):
        errors["max_file_size"] = "a whole number of MiB above 0, or empty for no limit"
    return form, errors


def request_body(form: NewExportForm) -> ExportCreate:
    tables: list[Any] = [{"name": t, "columns": form.columns[t]} if t in form.columns else t
                         for t in form.tables]
    # validated like an API request body: a format or compression not offered is a
    # ValidationError shown next to its field
    return ExportCreate.model_validate({
        "source": form.source, "tables": tables or None, "format": form.format,
        "compression": form.compression or None, "destination": form.destination or "local",
        "max_file_size": int(form.max_file_mib) * MIB if form.max_file_mib else None,
        "callback_url": form.callback_url or None, "snapshot": form.snapshot})


def field_of(message: str) -> str:
    lowered = message.lower()
    for name, words in _FIELD_WORDS:
        if any(w in lowered for w in words):
            return name
    return "form"


def validation_errors(exc: ValidationError) -> dict[str, str]:
    errors: dict[str, str] = {}
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ())]
        name = "tables" if loc and loc[0] == "tables" else (loc[0] if loc else "form")
        errors.setdefault(name, e.get("msg", "invalid"))
    return errors


def _catalog(settings: Any, source: str) -> tuple[list[Any], str | None]:
    if not source:
        return [], None
    try:
        return source_routes.list_tables(source, settings), None
    except EgressError as exc:
        return [], problem_of(exc)[2]


async def _render(request: Request, form: NewExportForm, errors: dict[str, str],
                  estimate: Any = None, status: int = 200) -> Response:
    settings = request.app.state.settings
    tables, catalog_error = await anyio.to_thread.run_sync(_catalog, settings, form.source)
    if catalog_error:
        errors.setdefault("source", catalog_error)
    return page(request, "new.html", status, form=form, errors=errors, estimate=estimate,
                sources=sorted(settings.sources), tables=tables,
                destinations=sorted(settings.destinations) or ["local"],
                formats=get_args(Format), compressions=get_args(Compression))


@router.get("/exports/new", dependencies=[Depends(needs("exports:create"))])
async def new_export(request: Request, principal: WebPrincipal,
                     source: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    sources = sorted(request.app.state.settings.sources)
    chosen = source if source is not None else (sources[0] if len(sources) == 1 else "")
    return await _render(request, NewExportForm(source=chosen), {})


def _estimate(request: Request, principal: Principal, body: ExportCreate) -> Any:
    state = request.app.state
    return export_routes.estimate(body, principal, state.settings, state.store)


def _create(request: Request, principal: Principal, body: ExportCreate) -> Any:
    state = request.app.state
    return export_routes.create_export(body, request, Response(), principal, state.store,
                                       state.settings)


@router.post("/exports/new", dependencies=[Depends(needs("exports:create"))])
async def submit_export(request: Request, principal: WebPrincipal) -> Response:
    data = await read_form(request)
    form, errors = parse_form(data)
    action = (data.get("action") or ["estimate"])[0]
    if errors:
        return await _render(request, form, errors, status=422)
    try:
        body = request_body(form)
        if action == "start":
            created = await anyio.to_thread.run_sync(_create, request, principal, body)
            return RedirectResponse(f"/exports/{created.id}", status_code=303)
        estimate = await anyio.to_thread.run_sync(_estimate, request, principal, body)
    except ValidationError as exc:
        return await _render(request, form, validation_errors(exc), status=422)
    except EgressError as exc:
        status, _, detail, _ = problem_of(exc)
        return await _render(request, form, {field_of(detail): detail}, status=status)
    return await _render(request, form, {}, estimate=estimate)

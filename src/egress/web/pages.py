"""The pages: sign in and out, the exports list, an export's detail, its actions
(cancel, retry, delete) and downloads. Every read and write goes through the same use
cases as the API (egress.manager, api/views.py and the API's route functions), scoped
by the signed-in token's project: another project's export answers "not found"."""

from __future__ import annotations

from typing import Annotated, get_args
from urllib.parse import urlencode

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import RedirectResponse, Response

from egress import manager
from egress.api.auth import authenticate_digest
from egress.api.errors import Forbidden, Unauthorized
from egress.api.routes import deliveries as delivery_routes
from egress.api.routes import exports as export_routes
from egress.api.routes import files as file_routes
from egress.api.schemas import StateFilter
from egress.api.views import export_public, export_summaries
from egress.domain.access import hash_token
from egress.domain.jobs import ExportState
from egress.web.guard import WebPrincipal, WebRoute, login_page, needs, read_form, web_principal
from egress.web.render import page
from egress.web.session import clear_session, looks_like_token, new_session, set_session

router = APIRouter(route_class=WebRoute, include_in_schema=False)

#: Exports per page of the list.
PAGE_SIZE = 25
TERMINAL = ("completed", "expired", "failed", "cancelled")
WRONG_TOKEN = ("That API token is unknown or was revoked. Paste a token made with "
               "'egress tokens create' (it starts with 'egr_').")


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


@router.get("/")
async def home(request: Request) -> Response:
    try:
        await web_principal(request)
    except Exception:  # not signed in (or no longer): the form
        return login_page(request)
    return _redirect("/exports")


@router.post("/login")
async def sign_in(request: Request) -> Response:
    form = await read_form(request)
    token = (form.get("token") or [""])[0].strip()
    if not looks_like_token(token):
        return login_page(request, WRONG_TOKEN, 401)
    try:
        await authenticate_digest(request, hash_token(token))
    except Unauthorized:
        return login_page(request, WRONG_TOKEN, 401)
    except Forbidden as exc:  # a worker token: it signs in nowhere
        return login_page(request, exc.detail, 403)
    response = _redirect("/exports")
    set_session(request, response, new_session(token))  # a fresh CSRF token too
    return response


@router.post("/logout")
async def sign_out(request: Request) -> Response:
    await read_form(request)
    response = _redirect("/")
    clear_session(response)
    return response


@router.get("/exports", dependencies=[Depends(needs("exports:read"))])
def exports_list(
    request: Request,
    principal: WebPrincipal,
    status: Annotated[StateFilter | None, Query()] = None,
    before: Annotated[str | None, Query(min_length=1, max_length=64,
                                        pattern=r"^[a-z]+_[0-9a-f]+$")] = None,
) -> Response:
    store = request.app.state.store
    states = [ExportState(status)] if status else None
    exports = manager.list_exports(store, principal.project, states=states, limit=PAGE_SIZE,
                                   before_id=before)
    items = export_summaries(store, exports, admin="admin" in principal.scopes)
    params = [("id", e.id) for e in items if e.status not in TERMINAL]
    if before is None:
        # the newest page also announces exports created after it was drawn
        params.append(("after", exports[0].id if exports else "exp_0"))
        if status:
            params.append(("status", status))
    return page(request, "list.html", items=items, status=status, states=get_args(StateFilter),
                next_before=exports[-1].id if len(exports) == PAGE_SIZE else None,
                live_url="/live/exports?" + urlencode(params) if params else "")


@router.get("/exports/{export_id}", dependencies=[Depends(needs("exports:read"))])
def export_detail(export_id: str, request: Request, principal: WebPrincipal) -> Response:
    store, settings = request.app.state.store, request.app.state.settings
    export = manager.get_export(store, principal.project, export_id)
    view = export_public(store, settings, export, admin="admin" in principal.scopes)
    sent = delivery_routes.list_deliveries(export_id, principal, store).deliveries
    return page(request, "detail.html", export=view, deliveries=sent,
                live=view.status not in TERMINAL,
                can_cancel=principal.has("exports:cancel"),
                can_retry=principal.has("exports:create"))


@router.post("/exports/{export_id}/{action}")
async def export_action(export_id: str, action: str, request: Request,
                        principal: WebPrincipal) -> Response:
    await read_form(request)
    use_case = {"cancel": export_routes.cancel_export, "retry": export_routes.retry_export,
                "delete": export_routes.delete_export}.get(action)
    if use_case is None:
        return page(request, "error.html", 404, title="Not found",
                    detail=f"no action {action!r}; the actions are cancel, retry and delete")
    # the API route function checks and audits exactly as a call of the API does
    needed = "exports:create" if action == "retry" else "exports:cancel"
    await needs(needed)(principal)
    state = request.app.state
    await anyio.to_thread.run_sync(use_case, export_id, request, principal, state.store,
                                   state.settings)
    return _redirect("/exports" if action == "delete" else f"/exports/{export_id}")


@router.get("/exports/{export_id}/files/{name:path}",
            dependencies=[Depends(needs("exports:read"))])
def download(export_id: str, name: str, request: Request, principal: WebPrincipal) -> Response:
    state = request.app.state
    return file_routes.download(export_id, name, request, principal, state.store,
                                state.settings)

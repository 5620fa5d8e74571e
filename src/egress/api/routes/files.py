"""Downloads: ``GET /v1/exports/{id}/files/{name}`` (local files streamed with Range and
Content-Disposition; S3 objects by a 302 to a fresh presigned URL), and signed links that
work without a token (``POST /v1/exports/{id}/links``, ``GET /v1/links/{link}``).

Only files the export lists (and its manifest once completed) can be fetched: names come
from the export's checkpoints, never from the request as a path.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path, PurePosixPath

from fastapi import APIRouter, Depends, Request
from starlette.responses import FileResponse, RedirectResponse, Response

from egress import manager
from egress.api.auth import audit
from egress.api.deps import PrincipalDep, SettingsDep, StoreDep, require_scope
from egress.api.errors import BODY_ERRORS, COMMON_ERRORS, NOT_FOUND, Gone, problem_doc
from egress.api.links import Link, public_base, sign_link, verify_link
from egress.api.schemas import LinkCreate, LinkPublic
from egress.config import Settings
from egress.domain.access import Principal
from egress.domain.jobs import ExportRecord, ExportState
from egress.engine.manifest import MANIFEST
from egress.exceptions import ConfigError, NotFoundError
from egress.export_view import export_view
from egress.sinks.s3_client import content_type
from egress.store.base import JobStore

router = APIRouter(tags=["files"])

FILE_RESPONSES: dict[int | str, dict] = {
    200: {"description": "The file (Accept-Ranges: bytes)",
          "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
    206: {"description": "The requested range of the file",
          "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
    302: {"description": "S3 destination: a presigned URL that expires soon (Location)"},
    **NOT_FOUND,
}


def export_files(store: JobStore, settings: Settings, export: ExportRecord) -> list[str]:
    """Names of the files an export offers for download."""
    names = [f.name for f in export_view(store, export, settings).files]
    if export.state is ExportState.COMPLETED:
        names.append(MANIFEST)
    return names


def _check_file(store: JobStore, settings: Settings, export: ExportRecord, name: str) -> str:
    names = export_files(store, settings, export)
    if name not in names:
        listing = ", ".join(names[:20]) or "none yet"
        raise NotFoundError(f"export {export.id} has no file {name!r}; its files: {listing}")
    return name


def file_response(settings: Settings, export: ExportRecord, name: str) -> Response:
    dest = settings.destination(export.destination)
    if dest.get("type", "local") != "local":
        url = manager.open_sink(settings, export).presign(  # type: ignore[attr-defined]  # S3: checked above
            name, settings.api.presign_seconds)
        return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    root = manager.export_root(settings, export).resolve()
    path = (root / name).resolve()
    if root not in path.parents or not path.is_file():
        raise NotFoundError(f"file {name!r} of export {export.id} is no longer there "
                            "(removed with a cancelled, failed or deleted export)")
    return FileResponse(Path(path), filename=PurePosixPath(name).name,
                        media_type=content_type(name), headers={"Cache-Control": "private"})


@router.get(
    "/v1/exports/{export_id}/files/{name:path}",
    summary="Download a file of an export (Range supported; S3: 302 to a presigned URL)",
    response_class=Response,
    dependencies=[Depends(require_scope("exports:read"))],
    responses={**COMMON_ERRORS, **FILE_RESPONSES},
)
def download(export_id: str, name: str, request: Request, principal: PrincipalDep,
             store: StoreDep, settings: SettingsDep) -> Response:
    export = manager.get_export(store, principal.project, export_id)
    _check_file(store, settings, export, name)
    response = file_response(settings, export, name)
    audit(request, principal, "file.download", export_id=export.id, file=name,
          range=request.headers.get("range"))
    return response


@router.post(
    "/v1/exports/{export_id}/links",
    status_code=201,
    summary="Make an expiring signed download link that works without a token",
    dependencies=[Depends(require_scope("exports:read"))],
    responses={**COMMON_ERRORS, **NOT_FOUND, **BODY_ERRORS},
)
def create_link(export_id: str, body: LinkCreate, request: Request, principal: PrincipalDep,
                store: StoreDep, settings: SettingsDep) -> LinkPublic:
    export = manager.get_export(store, principal.project, export_id)
    _check_file(store, settings, export, body.file)
    seconds = body.expires_in or settings.api.link_default_seconds
    if seconds > settings.api.link_max_seconds:
        raise ConfigError(f"expires_in may be at most {settings.api.link_max_seconds} s "
                          "(api.link_max_seconds)")
    expires_at = int(time.time()) + seconds
    signed = sign_link(request.app.state.link_key, Link(
        project=principal.project, export_id=export.id, file=body.file,
        expires_at=expires_at, token_id=principal.token_id))
    audit(request, principal, "link.create", export_id=export.id, file=body.file,
          expires_at=expires_at)
    base = public_base(settings, str(request.base_url))
    return LinkPublic(url=f"{base}/v1/links/{signed}", file=body.file,
                      expires_at=dt.datetime.fromtimestamp(expires_at, dt.UTC))


@router.get(
    "/v1/links/{link}",
    summary="Download through a signed link (no token needed)",
    response_class=Response,
    responses={**FILE_RESPONSES, 410: problem_doc("The link has expired")},
)
def follow_link(link: str, request: Request, store: StoreDep, settings: SettingsDep
                ) -> Response:
    found = verify_link(request.app.state.link_key, link)
    if found is None:
        raise NotFoundError("no such download link")
    if found.expires_at < time.time():
        raise Gone("this download link has expired; ask for a new one "
                   "(POST /v1/exports/{id}/links)")
    token = store.token_get(found.token_id)
    if token is None or not token.active or token.project != found.project:
        raise NotFoundError("no such download link (the token that made it was revoked)")
    export = manager.get_export(store, found.project, found.export_id)
    _check_file(store, settings, export, found.file)
    response = file_response(settings, export, found.file)
    audit(request, Principal(found.project, found.token_id, frozenset()), "link.download",
          export_id=export.id, file=found.file, range=request.headers.get("range"))
    return response

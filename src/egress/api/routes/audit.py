"""``/v1/audit``: the project's audit log, for ``admin`` tokens: who created, cancelled,
retried, deleted or downloaded what, from where, newest first."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from egress.api.deps import PrincipalDep, StoreDep, require_scope
from egress.api.errors import COMMON_ERRORS
from egress.domain.access import AUDIT_ACTIONS, AuditEntry

router = APIRouter(tags=["audit"], responses=COMMON_ERRORS)

AuditAction = Literal[AUDIT_ACTIONS]  # type: ignore[valid-type]  # a tuple of literals


class AuditEntryPublic(BaseModel):
    id: int = Field(description="Increasing: newer entries have larger ids.")
    action: AuditAction
    at: dt.datetime
    token_id: str | None = Field(description="The token that acted (for a signed link: the "
                                             "token that made the link).")
    export_id: str | None
    client_address: str | None
    details: dict[str, Any] = Field(description="What the action named: file, range, the "
                                                "query's SHA-256 and length (never its text)…")


class AuditPage(BaseModel):
    items: list[AuditEntryPublic]
    next_before: int | None = Field(
        description="Pass as `before` for the next (older) page; null on the last page.")


def entry_public(entry: AuditEntry) -> AuditEntryPublic:
    return AuditEntryPublic(
        id=entry.id, action=entry.action, at=dt.datetime.fromtimestamp(entry.at, dt.UTC),
        token_id=entry.token_id, export_id=entry.export_id,
        client_address=entry.client_address, details=dict(entry.details))


@router.get(
    "/v1/audit",
    summary="The project's audit log, newest first",
    dependencies=[Depends(require_scope("admin"))],
)
def list_audit(
    principal: PrincipalDep,
    store: StoreDep,
    action: Annotated[list[AuditAction] | None, Query(
        description="Only these actions (repeat the parameter for several).")] = None,
    export_id: Annotated[str | None, Query(min_length=1, max_length=64,
                                           pattern=r"^[a-z]+_[0-9a-f]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    # an entry id: a 64-bit integer in both stores (a larger one overflowed SQLite: 500)
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1,
                                        description="Cursor: `next_before` of a page.")] = None,
) -> AuditPage:
    entries = store.audit_list(principal.project, export_id=export_id, actions=action,
                               limit=limit, before_id=before)
    return AuditPage(items=[entry_public(e) for e in entries],
                     next_before=entries[-1].id if len(entries) == limit else None)

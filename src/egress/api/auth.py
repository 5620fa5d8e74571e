"""Authentication (``Authorization: Bearer <token>``), scopes, rate limits, audit writes.

Only the SHA-256 of a token is looked up; the token itself is never logged or kept.
A caller is one token of one project (:class:`~egress.api.deps.Principal`); routers
scope every read and write by ``principal.project``.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from fastapi import Request

from egress.api.deps import Principal
from egress.api.errors import Forbidden, TooManyRequests, Unauthorized
from egress.domain.access import TOKEN_PREFIX, AuditEntry, hash_token

log = logging.getLogger(__name__)

#: Longest header value looked at (a token is ~47 characters).
MAX_TOKEN_LENGTH = 256


def client_address(request: Request) -> str | None:
    return request.client.host if request.client else None


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized(
            "missing token: send 'Authorization: Bearer <token>' "
            "(tokens are made with 'egress tokens create')"
        )
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    if len(token) > MAX_TOKEN_LENGTH or not token.startswith(TOKEN_PREFIX):
        raise Unauthorized("unknown or revoked token")
    return token


def authenticate(request: Request) -> Principal:
    """The caller of ``request``; 401 when the token is missing, unknown or revoked,
    429 when it is over its rate limit."""
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    token = _bearer(request)
    digest = hash_token(token)
    store = request.app.state.store
    record = store.token_find(digest)
    # compare_digest: the lookup matched by index already; this keeps the check explicit
    if record is None or not record.active or not hmac.compare_digest(record.token_hash, digest):
        raise Unauthorized("unknown or revoked token")
    wait = request.app.state.limiter.acquire(record.id)
    if wait > 0:
        raise TooManyRequests(
            f"rate limit of this token exceeded; retry after {wait:.1f} s "
            "(the limit is set by api.rate_limit_per_second and api.rate_limit_burst)",
            retry_after=wait,
        )
    interval = request.app.state.settings.api.token_touch_seconds
    # a write only when due (by the value just read): not a write lock per request
    if record.last_used_at is None or time.time() - record.last_used_at >= interval:
        try:
            store.token_touch(record.id, interval)
        except Exception as exc:  # bookkeeping only: never fail a request for it
            log.warning("could not record token use", extra={"token_id": record.id,
                                                             "error": str(exc)})
    principal = Principal(project=record.project, token_id=record.id,
                          scopes=frozenset(record.scopes), client=client_address(request))
    request.state.principal = principal
    return principal


def check_scope(principal: Principal, scope: str) -> Principal:
    if not principal.has(scope):
        have = ", ".join(sorted(principal.scopes)) or "none"
        raise Forbidden(f"this operation needs the scope {scope!r} (or 'admin'); "
                        f"the token has: {have}")
    return principal


def audit(
    request: Request,
    principal: Principal | None,
    action: str,
    *,
    project: str | None = None,
    export_id: str | None = None,
    token_id: str | None = None,
    **details: Any,
) -> None:
    """Write one audit entry (who, from where, what): after the action succeeded, and
    for downloads before any byte is sent. If the store fails here the request fails
    (503) rather than report success for an action missing from the log; every audited
    action can be repeated safely (cancel, delete, Idempotency-Key on create)."""
    request.app.state.store.audit_write(AuditEntry(
        project=project or (principal.project if principal else "default"),
        action=action,
        token_id=token_id or (principal.token_id if principal else None),
        export_id=export_id,
        client_address=client_address(request),
        details={k: v for k, v in details.items() if v is not None},
    ))

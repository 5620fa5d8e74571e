"""Authentication (``Authorization: Bearer <token>``), scopes, rate limits, audit writes.

Only the SHA-256 of a token is looked up; the token itself is never logged or kept.
A caller is one token of one project (:class:`~egress.api.deps.Principal`); routers
scope every read and write by ``principal.project``.

Verified tokens are cached per API process for :data:`TOKEN_CACHE_SECONDS` (keyed by
the hash), so most requests authenticate without a store read. Bounded staleness: a
token revoked through this process's store (``store.token_revoke``) stops working at
the next request; one revoked elsewhere (``egress tokens revoke``, another API node)
stops working within ``TOKEN_CACHE_SECONDS``. Unknown and revoked tokens are never
cached: every such request reads the store.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from fastapi import Request

from egress.api.errors import Forbidden, TooManyRequests, Unauthorized
from egress.domain.access import (
    TOKEN_PREFIX,
    WORKER_SCOPE,
    AuditEntry,
    Principal,
    TokenRecord,
    hash_token,
)
from egress.store.base import JobStore

log = logging.getLogger(__name__)

#: Longest header value looked at (a token is ~47 characters).
MAX_TOKEN_LENGTH = 256
#: Seconds a verified token is trusted without reading the store again: the longest a
#: token revoked by another process keeps working on this one.
TOKEN_CACHE_SECONDS = 5.0
#: Tokens cached at most (about 300 bytes each); beyond it the cache starts afresh.
TOKEN_CACHE_SIZE = 10_000


@dataclass
class _Cached:
    record: TokenRecord
    expires: float  # time.monotonic()
    #: when this process last wrote (or read) the token's last_used_at (epoch seconds)
    used_at: float | None


class TokenCache:
    """Verified tokens by hash, for ``ttl`` seconds, dropped whenever the store counts a
    revocation (``token_revocations``; a store without that counter is never cached)."""

    def __init__(self, ttl: float = TOKEN_CACHE_SECONDS, size: int = TOKEN_CACHE_SIZE) -> None:
        self.ttl, self.size = ttl, size
        self._entries: dict[str, _Cached] = {}
        self._revocations: int | None = None

    def get(self, store: JobStore, digest: str) -> _Cached | None:
        revocations = getattr(store, "token_revocations", None)
        if revocations is None:
            return None
        if revocations != self._revocations:
            self._entries = {}
            self._revocations = revocations
        entry = self._entries.get(digest)
        if entry is None or entry.expires <= time.monotonic():
            return None
        return entry

    def lookup(self, store: JobStore, digest: str) -> _Cached | None:
        """Read the store (blocking) and cache an active token."""
        before = getattr(store, "token_revocations", None)
        record = store.token_find(digest)
        if record is None or not record.active:
            return None
        entry = _Cached(record, time.monotonic() + self.ttl, record.last_used_at)
        # a revocation counted during the read may have been missed by it: keep the
        # answer for this request only
        if before is not None and before == self._revocations == getattr(
                store, "token_revocations", None):
            if len(self._entries) >= self.size:
                self._entries = {}
            self._entries[digest] = entry
        return entry


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


async def authenticate(request: Request, *, worker: bool = False) -> Principal:
    """The caller of ``request``; 401 when the token is missing, unknown or revoked,
    429 when it is over its rate limit. Reads the store (in a worker thread) only for a
    token not cached, and writes ``last_used_at`` at most once per
    ``api.token_touch_seconds``. ``worker``: the internal worker routes, which only a
    token of scope ``worker`` may call (and such a token nothing else)."""
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    return await authenticate_digest(request, hash_token(_bearer(request)), worker=worker)


async def authenticate_digest(request: Request, digest: str, *, worker: bool = False
                              ) -> Principal:
    """The caller whose token has the SHA-256 ``digest`` (the web page's session keeps
    the digest, not the token): the same checks, limits and caching as a bearer token."""
    app_state = request.app.state
    store = app_state.store
    cache: TokenCache | None = getattr(app_state, "token_cache", None)
    if cache is None:
        cache = app_state.token_cache = TokenCache()
    entry = cache.get(store, digest)
    if entry is None:
        entry = await anyio.to_thread.run_sync(cache.lookup, store, digest)
    # compare_digest: the lookup matched by index already; this keeps the check explicit
    if entry is None or not hmac.compare_digest(entry.record.token_hash, digest):
        raise Unauthorized("unknown or revoked token")
    record = entry.record
    is_worker = WORKER_SCOPE in record.scopes
    if worker and not is_worker:
        raise Forbidden(f"the worker routes need a token of scope {WORKER_SCOPE!r} "
                        "(egress tokens create --scopes worker)")
    if is_worker and not worker:
        raise Forbidden("a worker token is for 'egress worker --api' only: it can neither "
                        "read nor create exports")
    # Workers are the fleet, not a tenant: their calls (claims, heartbeats, commits) are
    # paced by their own settings, never turned away by a tenant's rate limit.
    wait = 0.0 if is_worker else app_state.limiter.acquire(record.id)
    if wait > 0:
        raise TooManyRequests(
            f"rate limit of this token exceeded; retry after {wait:.1f} s "
            "(the limit is set by api.rate_limit_per_second and api.rate_limit_burst)",
            retry_after=wait,
        )
    interval = app_state.settings.api.token_touch_seconds
    now = time.time()
    # a write only when due (by the value last read or written): not a write per request
    if entry.used_at is None or now - entry.used_at >= interval:
        entry.used_at = now
        await anyio.to_thread.run_sync(_touch, store, record.id, interval)
    principal = Principal(project=record.project, token_id=record.id,
                          scopes=frozenset(record.scopes), client=client_address(request))
    request.state.principal = principal
    return principal


def _touch(store: JobStore, token_id: str, interval: float) -> None:
    try:
        store.token_touch(token_id, interval)
    except Exception as exc:  # bookkeeping only: never fail a request for it
        log.warning("could not record token use", extra={"token_id": token_id,
                                                         "error": str(exc)})


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
    request.app.state.store.audit_write(audit_entry(
        request, principal, action, project=project, export_id=export_id,
        token_id=token_id, **details))


def audit_entry(
    request: Request,
    principal: Principal | None,
    action: str,
    *,
    project: str | None = None,
    export_id: str | None = None,
    token_id: str | None = None,
    **details: Any,
) -> AuditEntry:
    """The audit entry of an action, for a store call that writes it with the action."""
    return AuditEntry(
        project=project or (principal.project if principal else "default"),
        action=action,
        token_id=token_id or (principal.token_id if principal else None),
        export_id=export_id,
        client_address=client_address(request),
        details={k: v for k, v in details.items() if v is not None},
    )

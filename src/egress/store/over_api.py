"""A worker's job store reached through the API (``egress worker --api URL``): workers
without database credentials, as the design wants for fleets.

Each :class:`~egress.store.base.WorkerStore` call is one ``POST
/internal/v1/worker/<operation>`` with a token of scope ``worker``; the API runs the same
store method, so fencing is the store's own: a commit, heartbeat or finish carries the
lease token and the store refuses it once the lease is lost. A call that cannot reach the
API raises :class:`StoreError`, which the worker treats like a database that is away
(it retries; a lease it cannot renew expires and the task is rescued elsewhere).
"""

from __future__ import annotations

import functools
from typing import Any, cast

import httpx

from egress import __version__
from egress.exceptions import ConfigError, StoreError
from egress.redact import redact
from egress.store.base import WORKER_OPERATIONS, WorkerStore
from egress.store.wire import WireError, decode, encode

#: Path of the worker routes; the operation's name follows.
ROUTE_PREFIX = "/internal/v1/worker/"
#: Header naming the worker's egress version (the API logs a mismatch).
VERSION_HEADER = "X-Egress-Version"


class WorkerTokenRefused(ConfigError):
    """The API refused the worker's token (unknown, revoked, or not of scope ``worker``)."""


class ApiWorkerStore:
    """The worker's store operations as HTTP calls to one API base URL."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"bad API URL {url!r}: give http(s)://host[:port][/prefix]")
        if not token:
            raise ConfigError("a worker token is needed with --api: make one with "
                              "'egress tokens create --scope worker' and pass it with --token "
                              "or EGRESS_WORKER_API_TOKEN")
        self.url = url.rstrip("/")
        # A read may wait on the store's own lock queue: a generous read timeout; a
        # connection that cannot be made fails fast and is retried by the caller.
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", VERSION_HEADER: __version__},
            timeout=httpx.Timeout(timeout, connect=5.0),
        )

    def __getattr__(self, name: str) -> Any:
        if name in WORKER_OPERATIONS:
            return functools.partial(self.call, name)
        raise AttributeError(f"{name!r} is not a worker store operation")

    def call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        body = {"args": encode(list(args)), "kwargs": encode(kwargs)}
        try:
            response = self._client.post(ROUTE_PREFIX + operation, json=body)
        except httpx.TransportError as exc:
            raise StoreError(f"the API at {self.url} cannot be reached: "
                             f"{type(exc).__name__}: {redact(str(exc))}") from exc
        if response.status_code == 200:
            return decode(response.json()["result"], strict=False)
        detail = _detail(response)
        if response.status_code in (401, 403):
            raise WorkerTokenRefused(f"the API at {self.url} refused the worker token: {detail}")
        if response.status_code in (400, 404, 422):
            raise WireError(f"the API at {self.url} refused {operation}: {detail}")
        raise StoreError(f"{operation} through the API failed "
                         f"({response.status_code}): {detail}")

    def close(self) -> None:
        self._client.close()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    return str(body.get("detail") or body) if isinstance(body, dict) else str(body)


def open_worker_store(url: str, token: str) -> WorkerStore:
    """The store of a worker that talks only to the API at ``url``; checks the token and
    the store's readiness once, so that a bad URL or token fails at start-up."""
    store = ApiWorkerStore(url, token)
    try:
        if not store.call("schema_current"):
            raise StoreError("the job store behind the API is not migrated: "
                             "run 'egress migrate' where the store is reachable")
    except Exception:
        store.close()
        raise
    return cast(WorkerStore, store)

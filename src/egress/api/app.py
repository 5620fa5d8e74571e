"""The FastAPI application: ``create_app(settings)`` builds it; nothing happens at import.

The lifespan opens the job store (unless one is passed in, which the caller keeps
owning), runs an embedded worker in a thread when asked (``egress serve`` does by
default), and on shutdown stops the live-event hub, lets the worker finish the parts in
hand, and closes the store.

Around the routes: a request-body limit (413), and an access log plus Prometheus
metrics keyed by the route's template, never by the raw path (a signed link's path is
a credential).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute

from egress import __version__
from egress.api.apidocs import install_api_docs
from egress.api.errors import (
    BODY_ERRORS,
    COMMON_ERRORS,
    NOT_FOUND,
    PayloadTooLarge,
    error_response,
    install_error_handlers,
    use_problem_media_type,
)
from egress.api.links import check_public_url, load_link_key
from egress.catalog_cache import CatalogCache
from egress.config import Settings
from egress.exceptions import ConfigError
from egress.home import ensure_home
from egress.metrics import API_LATENCY as LATENCY
from egress.metrics import API_REQUESTS as REQUESTS
from egress.metrics import STORE_STATS
from egress.ratelimit import RateLimiter
from egress.redact import install_log_redaction
from egress.store.base import JobStore
from egress.store.over_api import ROUTE_PREFIX as WORKER_ROUTE_PREFIX

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Documented for the routes of other modules (events, deliveries): the body limit and
#: JSON parsing apply to every route.
OTHERS_ERRORS: dict[int | str, dict[str, Any]] = {**COMMON_ERRORS, **NOT_FOUND, **BODY_ERRORS}
#: Largest body of a worker route's call (a checkpoint; api.max_body_bytes is for tenants).
WORKER_MAX_BODY_BYTES = 16 * 1024 * 1024

DESCRIPTION = """\
Long exports of large databases as durable, resumable jobs. Authenticate with
`Authorization: Bearer <token>` (`egress tokens create`). Every error is
`application/problem+json` with `type`, `title`, `status` and `detail`.
"""


class BodyLimit:
    """413 for request bodies above ``limit`` bytes: by Content-Length, and for a body
    sent without one (chunked) by reading it here first (the server holds a body with a
    Content-Length to that length)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # a worker's checkpoint (a Parquet file's row-group footers) outgrows api.max_body_bytes
        worker = scope["path"].startswith(WORKER_ROUTE_PREFIX)
        limit = WORKER_MAX_BODY_BYTES if worker else self.limit

        def too_large(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
            return error_response(PayloadTooLarge(
                f"the request body is larger than {limit} bytes"
                + ("" if worker else " (api.max_body_bytes)")))(scope, receive, send)

        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await too_large(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        pending: list[Message] = []
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                pending.append(message)
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await too_large(scope, receive, send)
                return
            more = message.get("more_body", False)
        pending.insert(0, {"type": "http.request", "body": b"".join(chunks),
                           "more_body": False})

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)


class AccessLog:
    """One log line and the metrics per request, by route template."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = _route_template(scope)
            seconds = time.perf_counter() - start
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            LATENCY.labels(scope["method"], route).observe(seconds)
            client = scope.get("client")
            log.info("request", extra={"method": scope["method"], "route": route,
                                       "status": status, "ms": round(seconds * 1000, 1),
                                       "client": client[0] if client else None})


def _route_template(scope: Scope) -> str:
    """The matched route's template (never the raw path: a link's path is a credential)."""
    if "route" in scope:  # FastAPI's API routes say which they are
        return str(scope["route"].path)
    endpoint = scope.get("endpoint")  # Starlette's own routes (/docs, /openapi.json) do not
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", ()):
        if endpoint is not None and getattr(candidate, "endpoint", None) is endpoint:
            return str(candidate.path)
    return "unmatched"


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def reject_unknown_query(request: Request) -> None:
    """A misspelt query parameter (``?stauts=failed``) is an error, not silently ignored."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    allowed = _query_names(dependant)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise ConfigError(f"unknown query parameter(s) {', '.join(map(repr, unknown))}; "
                          f"allowed: {', '.join(sorted(allowed)) or 'none'}")


def _open_store(settings: Settings) -> JobStore:
    from egress.store.sql import SqlJobStore

    ensure_home(settings.home)
    # a connection per thread, and some for the embedded worker, the event streams and
    # the webhook dispatcher
    store = SqlJobStore(settings.store_url, pool_size=settings.api.threads + 8)
    store.migrate()
    return store


#: Store connections an API process opens at start (up to ``api.threads``): the
#: concurrency of a few hundred requests a second, not the most it could use (many API
#: processes times the threads would outgrow PostgreSQL's max_connections).
WARM_CONNECTIONS = 8


def _warm_pool(store: JobStore, settings: Settings) -> None:
    warm = getattr(store, "warm_pool", None)  # a store over the API has no pool
    if warm is not None:
        warm(min(settings.api.threads, WARM_CONNECTIONS))


def _include_routers(app: FastAPI) -> None:
    from egress.api.routes import (
        audit,
        deliveries,
        events,
        exports,
        files,
        health,
        rows,
        sources,
        worker,
    )

    own = [m.router for m in (health, exports, files, sources, rows, audit)]
    routers = [*own, events.router, deliveries.router, worker.router]
    allowed: list[tuple[re.Pattern[str], set[str]]] = []
    for router in routers:
        # routers of other modules get the common problem answers documented too
        app.include_router(router, responses=None if router in own else OTHERS_ERRORS)
        allowed += [(r.path_regex, set(r.methods or ())) for r in router.routes
                    if isinstance(r, APIRoute)]
    # for the Allow header of a 405: every method of the path, not those of one route
    app.state.allowed_methods = allowed


def _run_embedded(worker: Any, settings: Settings) -> None:
    """The embedded worker's thread: at the worker's CPU priority (``worker.nice``; its
    threads inherit it), so that the API's threads of the same process come first."""
    from egress.worker.priority import lower_priority

    lower_priority(settings.worker.nice)
    worker.run()


def create_app(
    settings: Settings, store: JobStore | None = None, *, run_worker: bool = False
) -> FastAPI:
    """The API for ``settings``. With ``store`` the caller owns it (and closes it);
    otherwise the lifespan opens and migrates one. ``run_worker`` runs an embedded
    worker (``settings.worker``) for as long as the app runs."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from egress.api.events import stop_hub

        # the blocking work's threads (anyio's default is 40): no more than the store's
        # pooled connections, so a burst queues in the loop instead of opening connections
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api.threads
        own = app.state.store is None
        if own:
            app.state.store = await anyio.to_thread.run_sync(_open_store, settings)
        # the connections a burst of requests needs, opened before the first request
        await anyio.to_thread.run_sync(_warm_pool, app.state.store, settings)
        stats_of = app.state.store
        STORE_STATS.attach(stats_of)  # /metrics: exports and tasks by state, the queue
        worker, thread = None, None
        if run_worker:
            from egress.worker.loop import Worker

            worker = Worker(app.state.store, settings)
            thread = threading.Thread(target=_run_embedded, args=(worker, settings),
                                      name="egress-worker", daemon=True)
            thread.start()
        try:
            yield
        finally:
            await stop_hub(app)
            STORE_STATS.detach(stats_of)
            if worker is not None and thread is not None:
                worker.stopping.set()
                await anyio.to_thread.run_sync(thread.join, settings.worker.grace_seconds + 5)
            if own:
                app.state.store.close()
                app.state.store = None

    app = FastAPI(
        title="egress", version=__version__, description=DESCRIPTION, lifespan=lifespan,
        # docs_url=None: /docs is installed below with assets from the package, not a CDN
        openapi_url="/openapi.json", docs_url=None, redoc_url=None,
        dependencies=[Depends(reject_unknown_query)],
    )
    app.state.settings = settings
    app.state.store = store
    ttl = settings.api.catalog_cache_seconds
    app.state.catalog = CatalogCache(ttl) if ttl > 0 else None
    app.state.limiter = RateLimiter(settings.api.rate_limit_per_second,
                                    settings.api.rate_limit_burst)
    app.state.link_key = load_link_key(settings)
    check_public_url(settings)
    install_log_redaction()  # presigned URLs are signed here: keep botocore's DEBUG clean
    install_error_handlers(app)
    _include_routers(app)
    install_api_docs(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer",
                "description": "An API token from 'egress tokens create'."}
            for path, operations in schema.get("paths", {}).items():
                if path.startswith("/v1/") and not path.startswith("/v1/links/"):
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = use_problem_media_type(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's own way
    app.add_middleware(BodyLimit, limit=settings.api.max_body_bytes)
    app.add_middleware(AccessLog)
    return app

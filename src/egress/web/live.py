"""Live updates for the pages: server-sent events from the API's event hub, for one
export (the detail page) or for every unfinished export a list page shows, merged into
one stream (browsers keep at most six connections per server: not one per row).

Same events as ``GET /v1/exports/{id}/events`` (snapshot, progress, state, gone; each
``data`` carries the export's ``id``), then ``end`` once every export watched reached
its final state; the page closes its EventSource on ``end``.

The newest page of the list also asks for exports created after the newest it shows
(``after``): the stream looks for them every few seconds (one small store read per open
list page, in the signed-in project only), sends ``created`` with the new export's id —
the page fetches its row from ``/live/rows`` — and watches it from then on. Such a
stream stays open (it never sends ``end``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from egress.api.events import KEEP_ALIVE, Event, EventHub, Subscription, encode, hub_for
from egress.api.routes.events import RETRY, EventStreamResponse
from egress.api.schemas import StateFilter
from egress.api.views import export_summaries
from egress.domain.jobs import ExportState
from egress.manager import get_export, list_exports
from egress.store.base import JobStore
from egress.web.guard import WebPrincipal, WebRoute, needs
from egress.web.render import page

router = APIRouter(route_class=WebRoute, include_in_schema=False)

#: The most exports one stream watches (a list page shows 25).
MAX_WATCHED = 100
#: Seconds between two looks for new exports of a list page's stream.
DISCOVER_SECONDS = 2.0
#: The most rows one fragment request draws.
PAGE_ROWS = 25
END = b"event: end\ndata: {}\n\n"
_DONE = object()


Discover = Callable[[], Awaitable[list[str]]]


async def merged(hub: EventHub, export_ids: list[str],
                 discover: Discover | None = None) -> AsyncIterator[bytes]:
    """The events of every export in ``export_ids`` in one stream, ``end`` after the
    last final one. With ``discover`` (the new exports' ids since the last call), new
    exports are announced (``created``) and watched too, and the stream stays open.
    Subscribed here, in the response: a stream never started leaks nothing; leaving (the
    page closed) unsubscribes from all."""
    queue: asyncio.Queue[object] = asyncio.Queue()
    subs = [hub.subscribe(i) for i in export_ids]

    async def pump(sub: Subscription) -> None:
        try:
            async for event in sub.events(hub.heartbeat):
                if event is not None:
                    queue.put_nowait(event)
        finally:
            queue.put_nowait(_DONE)

    tasks = [asyncio.create_task(pump(s)) for s in subs]
    loop = asyncio.get_running_loop()
    try:
        yield RETRY
        running = len(tasks)
        quiet_since = next_look = loop.time()
        while running or discover is not None:
            if discover is not None and loop.time() >= next_look:
                for export_id in await discover():
                    subs.append(sub := hub.subscribe(export_id))
                    tasks.append(asyncio.create_task(pump(sub)))
                    running += 1
                    yield f"event: created\ndata: {json.dumps({'id': export_id})}\n\n".encode()
                next_look = loop.time() + DISCOVER_SECONDS
            wait = hub.heartbeat if discover is None else max(0.0, next_look - loop.time())
            try:
                item = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                if loop.time() - quiet_since >= hub.heartbeat:
                    quiet_since = loop.time()
                    yield KEEP_ALIVE
                continue
            quiet_since = loop.time()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Event):
                yield encode(item)
        yield END
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sub in subs:
            hub.unsubscribe(sub)


def _check_all(store: JobStore, project: str, export_ids: list[str]) -> None:
    for export_id in export_ids:  # another project's export: not found, like a missing one
        get_export(store, project, export_id)


def _stream(request: Request, export_ids: list[str]) -> Response:
    return EventStreamResponse(merged(hub_for(request.app), export_ids),
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/exports/{export_id}/events", dependencies=[Depends(needs("exports:read"))])
async def export_events(export_id: str, request: Request, principal: WebPrincipal) -> Response:
    await anyio.to_thread.run_sync(_check_all, request.app.state.store, principal.project,
                                   [export_id])
    return _stream(request, [export_id])


def _newer(store: JobStore, project: str, after: str, status: str | None) -> list[str]:
    """Ids of the project's exports newer than ``after`` (ids sort by creation), oldest
    first; those the list's status filter would not show are left out."""
    states = [ExportState(status)] if status else None
    found = list_exports(store, project, states=states, limit=MAX_WATCHED)
    return [e.id for e in reversed(found) if e.id > after]


@router.get("/live/exports", dependencies=[Depends(needs("exports:read"))])
async def exports_events(
    request: Request, principal: WebPrincipal,
    id: Annotated[list[str], Query(max_length=MAX_WATCHED)] = [],  # noqa: B006  # FastAPI's way
    after: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z]+_[0-9a-f]+$")] = None,
    status: Annotated[StateFilter | None, Query()] = None,
) -> Response:
    ids = list(dict.fromkeys(id))
    if not ids and after is None:
        raise RequestValidationError([{"loc": ("query", "id"), "msg": "name an export to "
                                       "watch (id=…) or ask for new ones (after=…)",
                                       "type": "missing"}])
    store = request.app.state.store
    await anyio.to_thread.run_sync(_check_all, store, principal.project, ids)
    discover: Discover | None = None
    if after is not None:
        newest = after

        async def discover() -> list[str]:
            nonlocal newest
            new = await anyio.to_thread.run_sync(_newer, store, principal.project, newest,
                                                 status)
            if new:
                newest = new[-1]
            return [i for i in new if i not in ids]

    return EventStreamResponse(merged(hub_for(request.app), ids, discover),
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/live/rows", dependencies=[Depends(needs("exports:read"))])
def export_rows(
    request: Request, principal: WebPrincipal,
    id: Annotated[list[str], Query(min_length=1, max_length=PAGE_ROWS)],
) -> Response:
    """The list's rows of these exports (as the list draws them): for a page that was
    told of new exports. Another project's export answers "not found"."""
    store = request.app.state.store
    exports = [get_export(store, principal.project, i) for i in dict.fromkeys(id)]
    items = export_summaries(store, exports, admin="admin" in principal.scopes)
    return page(request, "_rows.html", items=items)

"""Live updates for the pages: server-sent events from the API's event hub, for one
export (the detail page) or for every unfinished export a list page shows, merged into
one stream (browsers keep at most six connections per server: not one per row).

Same events as ``GET /v1/exports/{id}/events`` (snapshot, progress, state, gone; each
``data`` carries the export's ``id``), then ``end`` once every export watched reached
its final state; the page closes its EventSource on ``end``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from egress.api.events import KEEP_ALIVE, Event, EventHub, Subscription, encode, hub_for
from egress.api.routes.events import RETRY, EventStreamResponse
from egress.manager import get_export
from egress.store.base import JobStore
from egress.web.guard import WebPrincipal, WebRoute, needs

router = APIRouter(route_class=WebRoute, include_in_schema=False)

#: The most exports one stream watches (a list page shows 25).
MAX_WATCHED = 100
END = b"event: end\ndata: {}\n\n"
_DONE = object()


async def merged(hub: EventHub, export_ids: list[str]) -> AsyncIterator[bytes]:
    """The events of every export in ``export_ids`` in one stream, ``end`` after the
    last final one. Subscribed here, in the response: a stream never started leaks
    nothing; leaving (the page closed) unsubscribes from all."""
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
    try:
        yield RETRY
        running = len(tasks)
        while running:
            try:
                item = await asyncio.wait_for(queue.get(), hub.heartbeat)
            except TimeoutError:
                yield KEEP_ALIVE
                continue
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


@router.get("/live/exports", dependencies=[Depends(needs("exports:read"))])
async def exports_events(
    request: Request, principal: WebPrincipal,
    id: Annotated[list[str], Query(min_length=1, max_length=MAX_WATCHED)],
) -> Response:
    ids = list(dict.fromkeys(id))
    await anyio.to_thread.run_sync(_check_all, request.app.state.store, principal.project, ids)
    return _stream(request, ids)

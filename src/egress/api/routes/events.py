"""``GET /v1/exports/{export_id}/events``: an export's live progress as server-sent events.

The stream starts with a ``snapshot``, then ``progress`` and ``state`` events as the
export moves, and ends after the final state. Events come from the process's
:class:`~egress.api.events.EventHub` (one store read per interval for all clients).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Request
from starlette.responses import StreamingResponse

from egress.api.deps import PrincipalDep, StoreDep, require_scope
from egress.api.events import KEEP_ALIVE, EventHub, encode, hub_for
from egress.manager import get_export

router = APIRouter(tags=["exports"])

#: Tells EventSource clients to reconnect after 2 s when the connection drops.
RETRY = b"retry: 2000\n\n"

DESCRIPTION = """\
Server-sent events (`text/event-stream`). Every event's `data` is one JSON object.

- `snapshot`: the whole view (status, rows, bytes, `tables` with rows/estimate, `rate`
  in rows/s, `eta_seconds`); always the first event, also after a reconnect.
- `progress`: the same fields, whenever rows, bytes or a table's state changed.
- `state`: `status`, `previous`, `error`, `finished_at` when the export's state changed.
  After a terminal state (`completed`, `failed`, `cancelled`) the stream ends.
- `gone`: the export was deleted; the stream ends.

A `: keep-alive` comment comes after 15 s without events. Event ids are versions of
the export; a client that reconnects with `Last-Event-ID` gets a fresh snapshot.
"""


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"


async def _stream(hub: EventHub, export_id: str) -> AsyncIterator[bytes]:
    # Subscribed here, not in the handler: a response that never starts leaks nothing.
    sub = hub.subscribe(export_id)
    yield RETRY
    async for event in sub.events(hub.heartbeat):
        yield KEEP_ALIVE if event is None else encode(event)


@router.get(
    "/v1/exports/{export_id}/events",
    response_class=EventStreamResponse,
    dependencies=[Depends(require_scope("exports:read"))],
    summary="Watch an export's progress and state (server-sent events)",
    description=DESCRIPTION,
    responses={200: {"description": "An event stream that ends after the final state."}},
)
async def export_events(
    export_id: str,
    request: Request,
    principal: PrincipalDep,
    store: StoreDep,
    last_event_id: Annotated[
        str | None,
        Header(description="Sent by EventSource on reconnect: a fresh snapshot follows."),
    ] = None,
) -> EventStreamResponse:
    # Another project's export is not found (404), like one that does not exist.
    await anyio.to_thread.run_sync(get_export, store, principal.project, export_id)
    return EventStreamResponse(
        _stream(hub_for(request.app), export_id),
        # No caching, and no buffering by proxies (nginx) that would hold events back.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

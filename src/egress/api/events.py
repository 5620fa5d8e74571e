"""Live events: one poller per process, fanned out to every subscriber of every export.

No client polls the database. The :class:`EventHub` reads the progress of every export
that has at least one subscriber with ONE store query per interval
(``JobStore.export_progress_many``) and turns what changed into events:

    snapshot   the whole view, first event of every stream (also after a reconnect)
    progress   rows, bytes, per-table rows/estimate, rate and ETA changed
    state      the export's state changed; after a terminal state the stream ends
    gone       the export no longer exists (deleted); the stream ends

Each subscriber has a small queue of its own. A slow reader never blocks the poller
or the other readers: a progress event replaces a progress event still waiting (each
carries full values, so nothing is lost but intermediate steps), and a queue that
overflows anyway collapses into one fresh snapshot. State events are never dropped.

The hub lives in the app's event loop: ``hub_for(app)`` makes it on first use, its
poller starts with the first subscriber and ends with the last; ``stop_hub(app)`` (in
the app's lifespan shutdown) ends the poller and every open stream.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette

from egress.domain.jobs import ExportState, TaskState
from egress.domain.progress import ExportProgress, shown_task_state
from egress.store.base import JobStore

log = logging.getLogger(__name__)

#: Seconds between two reads of the store (for every watched export at once).
POLL_SECONDS = 0.5
#: Seconds of silence after which a stream gets a ``: keep-alive`` comment.
HEARTBEAT_SECONDS = 15.0
#: Events waiting for one slow subscriber before its queue collapses into a snapshot.
MAX_PENDING = 16
#: The rate is measured over about this many seconds of polls.
RATE_WINDOW_SECONDS = 10.0
#: How long ``stop`` waits for a store read in flight before it leaves the read behind.
STOP_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Event:
    kind: str
    data: dict[str, Any]
    #: SSE id: the store-clock version of the reading the event reflects.
    id: str
    #: The stream ends after this event (terminal state, export gone).
    final: bool = False


def _view(p: ExportProgress, rate: float | None) -> dict[str, Any]:
    remaining: float | None = 0.0
    for t in p.tasks:
        if t.state in (TaskState.QUEUED, TaskState.RUNNING):
            if t.rows_estimate is None:
                remaining = None
                break
            remaining = (remaining or 0.0) + max(t.rows_estimate - t.rows, 0)
    eta = None
    if p.state.terminal:
        eta = 0.0 if p.state is ExportState.COMPLETED else None
    elif remaining is not None and rate:
        eta = round(remaining / rate, 1)
    estimates = [t.rows_estimate for t in p.tasks]
    return {
        "id": p.id,
        "status": str(p.state),
        "rows": p.rows,
        "rows_estimate": None if None in estimates else sum(e or 0 for e in estimates),
        "bytes": p.bytes,
        "rate": None if rate is None else round(rate, 1),
        "eta_seconds": eta,
        "error": p.error,
        "started_at": p.started_at,
        "finished_at": p.finished_at,
        "tables": [
            {"table": t.table, "status": shown_task_state(p.state, t.state), "rows": t.rows,
             "rows_estimate": t.rows_estimate, "bytes": t.bytes, "attempts": t.attempts,
             "error": t.error}
            for t in p.tasks
        ],
    }


def _visible(p: ExportProgress) -> tuple[Any, ...]:
    """What a progress event shows, minus the rate (a new rate alone is no event)."""
    return tuple((t.state, t.rows, t.bytes, t.rows_estimate, t.attempts, t.error)
                 for t in p.tasks)


@dataclass
class _Watch:
    """The hub's memory of one watched export."""

    last: ExportProgress | None = None
    snapshot: Event | None = None
    #: (monotonic time, rows) of recent polls, for the rate.
    samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def rate(self, p: ExportProgress, now: float) -> float | None:
        if p.state.terminal:
            took = (p.finished_at or 0.0) - (p.started_at or 0.0)
            return p.rows / took if p.started_at and took > 0 else None
        self.samples.append((now, p.rows))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW_SECONDS:
            self.samples.popleft()
        t0, rows0 = self.samples[0]
        if now - t0 >= 1.0:
            return (p.rows - rows0) / (now - t0)
        # Parts commit in steps: under a second of samples says little. Until then, the
        # average since the start (the version is the time of the latest commit).
        took = p.version - (p.started_at or p.version)
        return p.rows / took if took >= 0.5 else None


class Subscription:
    """One client's stream of events for one export."""

    def __init__(self, hub: EventHub, export_id: str, max_pending: int) -> None:
        self.hub, self.export_id, self._max = hub, export_id, max_pending
        self._pending: collections.deque[Event] = collections.deque()
        self._ready = asyncio.Event()
        self.closed = False
        #: Events dropped or merged because this reader was slow (for tests and logs).
        self.dropped = 0

    def push(self, event: Event, snapshot: Callable[[], Event | None]) -> None:
        if self.closed:
            return
        if event.kind == "progress" and self._pending and self._pending[-1].kind == "progress":
            self._pending[-1] = event  # full values: the newer one says it all
            self.dropped += 1
        elif len(self._pending) >= self._max:
            self.dropped += len(self._pending)
            fresh = snapshot()
            self._pending.clear()
            if fresh is not None:
                self._pending.append(fresh)
            if event.kind != "progress":
                self._pending.append(event)
        else:
            self._pending.append(event)
        self._ready.set()

    def close(self) -> None:
        """No more events (the hub stopped): the stream ends once the queue is read."""
        self.closed = True
        self._ready.set()

    async def next(self, timeout: float) -> Event | None:
        """The next event; None after ``timeout`` seconds of silence. Raises
        StopAsyncIteration when the hub closed this subscription and nothing is left."""
        while not self._pending:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
            if not self._pending and not self.closed:
                return None
        return self._pending.popleft()

    async def events(self, heartbeat: float) -> AsyncIterator[Event | None]:
        """Events until the final one (None: time for a heartbeat); unsubscribes at the end."""
        try:
            while True:
                try:
                    event = await self.next(heartbeat)
                except StopAsyncIteration:
                    return
                yield event
                if event is not None and event.final:
                    return
        finally:
            self.hub.unsubscribe(self)


class EventHub:
    def __init__(
        self,
        store: JobStore,
        *,
        interval: float = POLL_SECONDS,
        heartbeat: float = HEARTBEAT_SECONDS,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.store, self.interval, self.heartbeat = store, interval, heartbeat
        self.max_pending = max_pending
        #: Store reads made so far: one per interval, however many subscribers.
        self.polls = 0
        self._subs: dict[str, set[Subscription]] = {}
        self._watches: dict[str, _Watch] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        #: Stopped: new streams end at once (the server is going away).
        self.closed = False

    @property
    def watched(self) -> list[str]:
        return sorted(self._subs)

    def subscribe(self, export_id: str) -> Subscription:
        """A new stream for ``export_id`` (the caller checked access). Starts the poller
        if it is not running; must be called in the event loop that serves the app."""
        sub = Subscription(self, export_id, self.max_pending)
        if self.closed:
            sub.close()  # the client reconnects (retry) to a server that stays
            return sub
        self._subs.setdefault(export_id, set()).add(sub)
        watch = self._watches.setdefault(export_id, _Watch())
        if watch.snapshot is not None:
            sub.push(watch.snapshot, lambda: watch.snapshot)
        self._ensure_running()
        if watch.snapshot is None and self._wake is not None:
            self._wake.set()  # its snapshot comes with the next read, right now
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.export_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.export_id]
                self._watches.pop(sub.export_id, None)

    async def start(self) -> None:
        """Accept subscribers again after ``stop`` (an app served once more); the poller
        itself starts lazily, with the first subscriber."""
        self.closed = False

    async def stop(self) -> None:
        """End the poller and every open stream, and end new streams at once: the app is
        shutting down. Idempotent."""
        self.closed = True
        task, self._task = self._task, None
        if task is not None:
            # A read in flight ends first: cancelled, its thread would run on and give its
            # connection back to a store the app closes next. One that hangs is left.
            if self._wake is not None:
                self._wake.set()
            done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_SECONDS)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for subs in list(self._subs.values()):
            for sub in subs:
                sub.close()
        self._subs.clear()
        self._watches.clear()

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="event-hub")

    async def _run(self) -> None:
        assert self._wake is not None
        while self._subs and not self.closed:
            self._wake.clear()
            try:
                await self.poll_once()
            except Exception as exc:  # the store is away: keep the streams, try again
                log.warning("event hub read failed", extra={"error": str(exc)})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
        self._task = None  # no await since the check: a new subscriber starts a new one

    async def poll_once(self) -> None:
        """Read every watched export once and push what changed to its subscribers."""
        ids = list(self._subs)
        if not ids:
            return
        found = await anyio.to_thread.run_sync(self.store.export_progress_many, ids)
        self.polls += 1
        now = time.monotonic()
        for export_id in ids:
            if export_id in self._subs:  # not left while we were reading
                self._update(export_id, found.get(export_id), now)

    def _update(self, export_id: str, p: ExportProgress | None, now: float) -> None:
        watch = self._watches.setdefault(export_id, _Watch())
        events: list[Event] = []
        if p is None:
            events.append(Event("gone", {"id": export_id}, "", final=True))
        else:
            eid = f"{p.version:.6f}"
            view = _view(p, watch.rate(p, now))
            last, watch.last = watch.last, p
            watch.snapshot = Event("snapshot", view, eid)
            if last is None:
                events.append(watch.snapshot)
            elif _visible(p) != _visible(last):
                events.append(Event("progress", view, eid))
            # A first reading of a finished export: its final state, and the end.
            if p.state.terminal if last is None else p.state != last.state:
                events.append(Event(
                    "state",
                    {"id": p.id, "status": str(p.state),
                     "previous": None if last is None else str(last.state),
                     "error": p.error, "finished_at": p.finished_at},
                    eid, final=p.state.terminal,
                ))
        subs = self._subs.get(export_id, set())
        for event in events:
            for sub in subs:
                sub.push(event, lambda: watch.snapshot)
        if events and events[-1].final:
            # Nothing more will happen: stop reading it; the streams drain and end.
            for sub in subs:
                sub.close()
            self._subs.pop(export_id, None)
            self._watches.pop(export_id, None)


def encode(event: Event) -> bytes:
    """The event in the ``text/event-stream`` wire format (one JSON line of data)."""
    lines = [f"event: {event.kind}"]
    if event.id:
        lines.append(f"id: {event.id}")
    lines.append("data: " + json.dumps(event.data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


KEEP_ALIVE = b": keep-alive\n\n"


def hub_for(app: Starlette) -> EventHub:
    """The app's hub, made on first use from ``app.state.store`` (the app factory may
    set ``app.state.event_hub`` itself to choose the intervals)."""
    state = app.state
    hub: EventHub | None = getattr(state, "event_hub", None)
    if hub is None:
        hub = state.event_hub = EventHub(state.store)
    return hub


async def stop_hub(app: Starlette) -> None:
    """For the app's lifespan shutdown: end the poller and every open stream."""
    hub: EventHub | None = getattr(app.state, "event_hub", None)
    if hub is not None:
        await hub.stop()

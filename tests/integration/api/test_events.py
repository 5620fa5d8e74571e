"""Live events: the hub against the real stores, and ``GET /v1/exports/{id}/events``
over a real server with a real worker (SQLite and PostgreSQL stores)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from apiharness import Api, assert_problem, auth, make_settings
from egress.api.app import create_app
from egress.api.events import Event, EventHub, Subscription
from egress.api.server import Server
from egress.config import Settings
from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.store.sql import SqlJobStore
from jobsharness import make_events_db, wait_until

BIG_ROWS = 60_000


@pytest.fixture(scope="module")
def source_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("events-source") / "src.db"
    make_events_db(path, {"big": BIG_ROWS, "events": 100})
    return path


@pytest.fixture
def settings(tmp_path: Path, store_url: str, source_db: Path) -> Settings:
    s = make_settings(tmp_path / "home", store_url, source_db)
    # Parts of ~16 KiB: the big table takes a few seconds in about 400 commits.
    return replace(s, export=replace(s.export, part_size=16 * 1024))


def _export(store: SqlJobStore, tables: tuple[str, ...] = ("t",)) -> ExportRecord:
    export_id = new_id("exp")
    record, _ = store.export_create(
        ExportRecord(id=export_id, project="p", source="main", tables=tables, format="csv",
                     compression="none", destination="local", state=ExportState.QUEUED),
        [TaskRecord(id=new_id("tsk"), export_id=export_id, project="p", table=t, seq=i,
                    state=TaskState.QUEUED, rows_estimate=10_000)
         for i, t in enumerate(tables)],
    )
    return record


def _drain(sub: Subscription) -> list[Event]:
    out = []
    while sub._pending:
        out.append(sub._pending.popleft())
    return out


async def _first(sub: Subscription) -> Event:
    # a bound, not a wait: it returns with the first event (5 s ran out in a loaded CI)
    event = await sub.next(30.0)
    assert event is not None
    return event


def _run_export(store: SqlJobStore, max_pending: int) -> tuple[list[Event], list[Event], EventHub]:
    """Two subscribers; one reads after every poll, the other only at the end."""
    export = _export(store)

    async def scenario() -> tuple[list[Event], list[Event], EventHub]:
        hub = EventHub(store, interval=3600, max_pending=max_pending)  # we poll by hand
        fast, slow = hub.subscribe(export.id), hub.subscribe(export.id)
        seen = [await _first(fast)]
        [task] = store.task_claim("w", lease_seconds=30, project_cap=4)
        for i in range(1, 41):
            assert store.task_commit(task.id, task.lease_token, checkpoint={}, rows=i * 250,
                                     bytes=i * 9000)
            await hub.poll_once()
            seen += _drain(fast)
            assert len(slow._pending) <= max_pending  # bounded however far behind
        assert store.task_finish(task.id, task.lease_token)
        assert store.export_complete(export.id, {"total_rows": 10_000})
        await hub.poll_once()
        seen += _drain(fast)
        return seen, _drain(slow), hub

    return asyncio.run(scenario())


def test_progress_and_state_events_end_with_the_final_state(store):
    fast_events, _, hub = _run_export(store, max_pending=8)
    kinds = [e.kind for e in fast_events]
    assert kinds[:3] == ["snapshot", "progress", "state"]
    assert kinds[3:] == ["progress"] * 40 + ["state"]
    assert fast_events[0].data["status"] == "queued" and fast_events[0].data["rows"] == 0
    assert fast_events[2].data == {"id": fast_events[0].data["id"], "status": "running",
                                   "previous": "queued", "error": None, "finished_at": None}
    progress = [e.data for e in fast_events if e.kind == "progress"]
    assert [p["rows"] for p in progress[:40]] == [i * 250 for i in range(1, 41)]
    assert progress[10]["tables"] == [
        {"table": "t", "status": "running", "rows": 2750, "rows_estimate": 10_000,
         "bytes": 99_000, "attempts": 0, "error": None}]
    assert progress[10]["rows_estimate"] == 10_000
    assert progress[-1]["status"] == "completed" and progress[-1]["eta_seconds"] == 0.0
    assert fast_events[-1].final and fast_events[-1].data["status"] == "completed"
    assert fast_events[-1].data["previous"] == "running"
    assert not any(e.final for e in fast_events[:-1])
    ids = [float(e.id) for e in fast_events]
    assert ids == sorted(ids)  # versions of the export: they only grow
    assert hub.watched == []  # a finished export is no longer read


def test_slow_subscriber_gets_merged_progress_and_every_state(store):
    _, slow, _ = _run_export(store, max_pending=8)
    # It read nothing meanwhile: each run of progress events merged into the newest.
    assert [(e.kind, e.data["status"], e.data.get("rows")) for e in slow] == [
        ("snapshot", "queued", 0), ("progress", "running", 250), ("state", "running", None),
        ("progress", "completed", 10_000), ("state", "completed", None)]
    assert slow[-1].final


def test_overflowing_subscriber_collapses_to_a_snapshot_and_keeps_the_final_state(store):
    _, slow, _ = _run_export(store, max_pending=2)
    assert [(e.kind, e.data["status"]) for e in slow] == [
        ("snapshot", "completed"), ("state", "completed")]
    assert slow[0].data["rows"] == 10_000 and slow[-1].final


def test_two_subscribers_share_one_read_per_interval(store):
    export = _export(store)

    async def scenario() -> tuple[int, float]:
        hub = EventHub(store, interval=0.1)
        a, b = hub.subscribe(export.id), hub.subscribe(export.id)
        await _first(a), await _first(b)
        start, loop = hub.polls, asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(1.0)
        polls, took = hub.polls - start, loop.time() - t0
        await hub.stop()
        return polls, took

    polls, took = asyncio.run(scenario())
    # One read per interval for both (two pollers would make about twice as many).
    assert 3 <= polls <= took / 0.1 + 1


def test_unknown_export_is_gone_and_stop_ends_open_streams(store):
    export = _export(store)

    async def scenario() -> None:
        hub = EventHub(store, interval=0.05)
        missing = hub.subscribe("exp_missing")
        gone = await _first(missing)
        assert gone.kind == "gone" and gone.final
        open_sub = hub.subscribe(export.id)
        assert (await _first(open_sub)).kind == "snapshot"
        assert hub.watched == [export.id]
        await hub.stop()
        with pytest.raises(StopAsyncIteration):
            await open_sub.next(1.0)
        assert hub.watched == []

    asyncio.run(scenario())


def test_stop_waits_for_the_read_in_flight(store, monkeypatch):
    # Its thread holds a store connection: stop returning before it ends let the app close
    # the store under it (the connection then lingered, open, until garbage collected).
    export, reads = _export(store), []
    second_started, release, second_ended = (threading.Event(), threading.Event(),
                                             threading.Event())
    read = store.export_progress_many

    def held_read(ids):
        reads.append(ids)
        n = len(reads)
        if n == 2:  # the second read holds on until the test lets it go
            second_started.set()
            release.wait(30.0)
        try:
            return read(ids)
        finally:
            if n == 2:
                second_ended.set()

    monkeypatch.setattr(store, "export_progress_many", held_read)

    async def scenario() -> None:
        hub = EventHub(store, interval=0.05)
        sub = hub.subscribe(export.id)
        await _first(sub)
        assert await asyncio.to_thread(second_started.wait, 30.0)
        stopping = asyncio.create_task(hub.stop())
        await asyncio.sleep(0.2)
        assert not stopping.done()  # waiting for the read
        release.set()
        await asyncio.wait_for(stopping, 30.0)
        assert second_ended.is_set()
        assert hub.watched == [] and len(reads) == 2  # and no read after it

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_heartbeat_when_nothing_happens(store):
    export = _export(store)

    async def scenario() -> list[Event | None]:
        hub = EventHub(store, interval=0.05)
        sub = hub.subscribe(export.id)
        stream = sub.events(heartbeat=0.2)
        got = [await anext(stream), await anext(stream)]
        await stream.aclose()  # the client went away: unsubscribed
        assert hub.watched == []
        await hub.stop()
        return got

    first, second = asyncio.run(scenario())
    assert first is not None and first.kind == "snapshot"
    assert second is None  # silence: the route sends ": keep-alive"


# --- over HTTP: GET /v1/exports/{id}/events ----------------------------------------------


def read_sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Events of a ``text/event-stream`` as they arrive: ``{"event", "data", "id"}``, or
    ``{"comment": text}`` for a comment line."""
    fields: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield {"comment": line[1:].strip()}
        elif line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        elif "data" in fields:
            yield {"event": fields.get("event"), "data": json.loads(fields["data"]),
                   "id": fields.get("id")}
            fields = {}
        else:
            fields = {}  # e.g. a lone ``retry:``


def test_a_client_sees_snapshot_progress_and_the_final_state(make_api):
    api: Api = make_api(run_worker=True)
    # Reads every 0.1 s: several steps even if the machine exports the table in a second.
    api.app.state.event_hub = EventHub(api.app.state.store, interval=0.1)
    created = api.create({"source": "main", "tables": ["big"], "format": "csv"})
    events = []
    with api.client.stream("GET", created["events_url"], headers=auth(api.token)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        # ends by itself after the final state; keep-alive comments come when a slow
        # machine leaves the stream quiet for a while
        events = [e for e in read_sse(r) if "comment" not in e]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "snapshot" and kinds[-1] == "state"
    assert events[0]["data"]["id"] == created["id"]
    assert events[-1]["data"]["status"] == "completed"
    assert kinds.count("state") <= 2  # running (if seen queued), then completed
    progress = [e["data"] for e in events if e["event"] == "progress"]
    rows = [p["rows"] for p in progress]
    assert len(set(rows)) >= 3 and rows == sorted(rows)  # several steps, never backwards
    # The last progress is the table done (the export completes a moment later, or in
    # the same read); the export's own end is the state event.
    assert rows[-1] == BIG_ROWS and progress[-1]["tables"][0]["status"] == "done"
    middle = [p["tables"][0] for p in progress if 0 < p["rows"] < BIG_ROWS]
    assert middle and all(t["table"] == "big" and t["rows_estimate"] == BIG_ROWS
                          for t in middle)
    assert any(t["status"] == "running" for t in middle)
    assert any(p["rate"] and p["eta_seconds"] is not None for p in progress[:-1])
    assert progress[-1]["rate"] > 0 and progress[-1]["eta_seconds"] == 0.0  # nothing left
    # The stream agrees with the status endpoint.
    view = api.get(created["status_url"]).json()
    assert view["rows"] == BIG_ROWS and view["bytes"] == progress[-1]["bytes"]


def test_two_clients_of_one_export_share_one_read_per_interval(make_api):
    api: Api = make_api()  # no worker: the export stays queued until cancelled
    hub = api.app.state.event_hub = EventHub(api.app.state.store, interval=0.1)
    created = api.create({"source": "main", "tables": ["events"]})
    streams: list[list[dict[str, Any]]] = [[], []]
    started = [threading.Event(), threading.Event()]

    def watch(i: int) -> None:
        with httpx.Client(base_url=api.client.base_url, timeout=30) as client, \
                client.stream("GET", created["events_url"], headers=auth(api.token)) as r:
            for event in read_sse(r):
                streams[i].append(event)
                started[i].set()

    threads = [threading.Thread(target=watch, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    assert all(s.wait(10) for s in started)
    assert hub.watched == [created["id"]] and len(hub._subs[created["id"]]) == 2
    before, t0 = hub.polls, time.monotonic()
    time.sleep(1.0)
    polls, took = hub.polls - before, time.monotonic() - t0
    assert api.post(f"/v1/exports/{created['id']}/cancel").status_code == 200
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    # One store read per interval serves both clients (two pollers: about twice as many).
    assert 3 <= polls <= took / 0.1 + 1
    for events in streams:
        # The cancel shows as the table's state (progress), then the export's (state).
        assert [e["event"] for e in events] == ["snapshot", "progress", "state"]
        assert events[1]["data"]["tables"][0]["status"] == "cancelled"
        assert events[-1]["data"]["status"] == "cancelled"
        assert events[-1]["data"]["previous"] == "queued"
    assert hub.watched == []


def test_keep_alive_and_a_fresh_snapshot_after_reconnecting(make_api):
    api: Api = make_api()
    api.app.state.event_hub = EventHub(api.app.state.store, interval=0.1, heartbeat=0.3)
    created = api.create({"source": "main", "tables": ["events"]})
    headers = {**auth(api.token), "Last-Event-ID": "1700000000.000000"}
    with api.client.stream("GET", created["events_url"], headers=headers) as r:
        seen = read_sse(r)
        first = next(seen)
        assert first["event"] == "snapshot" and first["data"]["status"] == "queued"
        assert float(first["id"]) > 1700000000  # a version of the export
        assert next(seen) == {"comment": "keep-alive"}


def test_scopes_and_projects(make_api, tokens):
    api: Api = make_api()
    created = api.create({"source": "main", "tables": ["events"]})
    url = created["events_url"]
    assert api.post(f"/v1/exports/{created['id']}/cancel").status_code == 200
    # exports:read is enough; a finished export answers its snapshot and final state.
    with api.client.stream("GET", url, headers=auth(tokens["exports:read"])) as r:
        assert r.status_code == 200
        assert [e["event"] for e in read_sse(r)] == ["snapshot", "state"]
    assert_problem(api.get(url, token=tokens["exports:create"]), 403, "exports:read")
    assert_problem(api.client.get(url), 401)
    # Another project's export is not found, like an unknown one.
    assert_problem(api.get(url, token=tokens["beta"]), 404, created["id"])
    assert_problem(api.get("/v1/exports/exp_nope/events"), 404, "exp_nope")


def test_open_streams_end_when_the_server_stops(settings, store, tokens):
    app = create_app(settings, store)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Without the hub ending them first, uvicorn would wait this long for open streams.
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=60)
    server = Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, 20)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(base_url=url, timeout=30, headers=auth(tokens["alpha"])) as client:
            created = client.post("/v1/exports", json={"source": "main", "tables": ["events"]})
            events_url = created.json()["events_url"]
            with client.stream("GET", events_url) as r:
                seen = read_sse(r)
                assert next(seen)["event"] == "snapshot"
                t0 = time.monotonic()
                server.should_exit = True  # what SIGTERM does
                assert list(seen) == []  # the stream ends cleanly, at once
                assert time.monotonic() - t0 < 5
        thread.join(10)
        assert not thread.is_alive()
        assert app.state.event_hub.closed
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()

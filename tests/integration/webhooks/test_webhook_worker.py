"""Workers deliver webhooks: a real export ends, its event reaches a receiver on 127.0.0.1,
and a worker killed between the commit and the send does not lose it."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from standardwebhooks import Webhook
from webhook_receiver import Receiver
from webhook_support import wait_for

from egress.config import Settings, load_settings
from egress.domain.deliveries import DeliveryState
from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from jobsharness import make_events_db, start_worker, stop, write_home

WORKER = {"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.1,
          "poll_seconds": 0.05, "lease_seconds": 5.0}


def _home(tmp_path: Path, store_url: str, **webhooks: object) -> Settings:
    """A home whose egress.toml allows the loopback receiver (the explicit test setting)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = make_events_db(tmp_path / "source.db", {"events": 300})
    home = tmp_path / "home"
    write_home(home, store_url=store_url, sources={"main": source}, worker=WORKER)
    values = {"allow_http": True, "allow_loopback": True, "timeout": 2.0,
              "lease_seconds": 3.0, "poll_seconds": 0.05, "schedule": [0.1], **webhooks}
    lines = ["", "[webhooks]"] + [
        f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]
    with open(home / "egress.toml", "a") as f:
        f.write("\n".join(lines) + "\n")
    return load_settings(home, env={})


def _create(store: SqlJobStore, settings: Settings, url: str) -> str:
    request = ExportRequest(source="main", tables=("events",), callback_url=url)
    return create_export(store, settings, request, project="acme")[0].id


def test_a_completed_export_is_announced_by_the_worker(
    tmp_path: Path, store_url: str, receiver: Receiver
):
    settings = _home(tmp_path, store_url)
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        export_id = _create(store, settings, receiver.url("/done"))
        # The dispatcher thread would send it within poll_seconds; a worker that exits
        # when idle sends what is due before it goes.
        settings = dataclasses.replace(
            settings, webhooks=dataclasses.replace(settings.webhooks, poll_seconds=3600),
            api=dataclasses.replace(settings.api, public_url="https://exports.example.com/"))
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        [got] = receiver.requests
        [secret] = store.webhook_secret_list("acme")
        event = Webhook(secret.secret).verify(got.body, got.headers)
        assert event["type"] == "export.completed"
        assert event["data"]["id"] == export_id and event["data"]["state"] == "completed"
        # the files, as a receiver needs them to fetch and check each one
        [file] = event["data"]["files"]
        on_disk = export_root(settings, store.export_get(None, export_id)) / file["name"]
        assert file["name"] == "events.csv" and file["table"] == "events"
        assert file["rows"] == 300 and file["bytes"] == on_disk.stat().st_size
        assert file["sha256"] == hashlib.sha256(on_disk.read_bytes()).hexdigest()
        assert file["download_url"] == (
            f"https://exports.example.com/v1/exports/{export_id}/files/events.csv")
        [delivery] = store.delivery_list("acme", export_id)
        assert got.headers["webhook-id"] == delivery.id
        assert store.delivery_list("acme", export_id)[0].state is DeliveryState.DELIVERED
    finally:
        store.close()


@pytest.mark.slow
def test_a_worker_killed_between_commit_and_send_still_delivers(
    tmp_path: Path, store_url: str, receiver: Receiver
):
    log = tmp_path / "workers.log"
    # 1. The dispatcher of the first worker never gets to run: the export completes (its
    #    outbox row is committed with it) and the worker is killed before any send.
    settings = _home(tmp_path, store_url, poll_seconds=3600)
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        export_id = _create(store, settings, receiver.url("/done"))
        first = start_worker(settings.home, log)
        try:
            assert wait_for(lambda: store.export_get(None, export_id).state
                            is ExportState.COMPLETED, timeout=60)
        finally:
            stop(first)
        [delivery] = store.delivery_list("acme", export_id)
        assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 0)
        assert receiver.requests == []

        # 2. The next worker sends it, and is killed while the request is in flight
        #    (after the send, before the attempt is recorded).
        settings = _home(tmp_path / "2", store_url)
        receiver.script = [("hang",)]
        second = start_worker(settings.home, log)
        try:
            assert receiver.arrived.wait(30)
        finally:
            stop(second)
        receiver.release.set()
        assert store.delivery_list("acme", export_id)[0].state is DeliveryState.PENDING

        # 3. A third worker sends it again once the dead worker's lease has ended.
        third = start_worker(settings.home, log)
        try:
            assert wait_for(lambda: store.delivery_list("acme", export_id)[0].state
                            is DeliveryState.DELIVERED, timeout=30)
        finally:
            stop(third)

        assert len(receiver.requests) == 2
        assert {r.headers["webhook-id"] for r in receiver.requests} == {delivery.id}
        [secret] = store.webhook_secret_list("acme")
        for got in receiver.requests:
            event = Webhook(secret.secret).verify(got.body, got.headers)
            assert event["type"] == "export.completed"
        # The attempt cut short by the kill was never recorded; the one that landed was.
        [attempt] = store.delivery_attempt_list("acme", export_id)
        assert attempt.status_code == 204 and attempt.worker
    finally:
        store.close()

"""Webhook deliveries in the store: outbox rows, the claim lease, attempts, replays, secrets."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from egress.domain.deliveries import AttemptOutcome, DeliveryState
from egress.store.schema import deliveries
from egress.store.sql import SqlJobStore

HOOK = "https://hooks.example.com/egress"


def _failed(store: SqlJobStore, make_export, project: str = "p"):
    record, _ = make_export(project, callback_url=HOOK)
    assert store.export_fail(record.id, "boom")
    [delivery] = store.delivery_list(project, record.id)
    return record, delivery


def test_cancel_writes_export_cancelled_in_its_transaction(store: SqlJobStore, make_export):
    hooked, _ = make_export("p", callback_url=HOOK)
    silent, _ = make_export("p")
    running, _ = make_export("p", callback_url=HOOK)
    store.task_claim("w", lease_seconds=30, project_cap=10, limit=10)
    for record in (hooked, silent, running):
        store.export_cancel("p", record.id)
    store.export_cancel("p", hooked.id)  # already cancelled: no second event
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(deliveries).order_by(deliveries.c.created_at)).all()
    assert sorted((r.export_id, r.event_type) for r in rows) == sorted(
        [(hooked.id, "export.cancelled"), (running.id, "export.cancelled")])
    assert {r.payload["data"]["state"] for r in rows} == {"cancelled"}
    assert {r.payload["type"] for r in rows} == {"export.cancelled"}


def test_new_deliveries_are_due_at_once_and_claimed_once(store: SqlJobStore, make_export):
    _, delivery = _failed(store, make_export)
    assert delivery.state is DeliveryState.PENDING and delivery.attempts == 0
    assert delivery.lease_token is None and delivery.round_started_at == delivery.created_at
    [claimed] = store.delivery_claim(lease_seconds=30)
    assert claimed.id == delivery.id and claimed.lease_token
    assert claimed.next_attempt_at >= store.now() + 25  # the lease end
    assert store.delivery_claim(lease_seconds=30) == []


def test_an_expired_claim_is_due_again_and_fences_the_old_holder(
    store: SqlJobStore, make_export
):
    _, delivery = _failed(store, make_export)
    [first] = store.delivery_claim(lease_seconds=1.0)
    time.sleep(1.1)
    [second] = store.delivery_claim(lease_seconds=30)
    assert second.id == first.id and second.lease_token != first.lease_token
    # The first holder comes back: its attempt is not recorded.
    assert store.delivery_record_attempt(
        first.id, first.lease_token, outcome=AttemptOutcome.SUCCESS, duration=0.1) is None
    done = store.delivery_record_attempt(
        second.id, second.lease_token, outcome=AttemptOutcome.SUCCESS, duration=0.25,
        status_code=204, address="93.184.215.14", worker="w2")
    assert done is not None and done.state is DeliveryState.DELIVERED
    [attempt] = store.delivery_attempt_list("p", delivery.export_id)
    assert (attempt.attempt, attempt.outcome, attempt.status_code, attempt.worker) == (
        1, AttemptOutcome.SUCCESS, 204, "w2")
    assert attempt.address == "93.184.215.14" and attempt.duration == pytest.approx(0.25)
    assert attempt.at == pytest.approx(done.updated_at - 0.25)


def test_attempts_move_the_delivery_through_its_states(store: SqlJobStore, make_export):
    record, _ = _failed(store, make_export)
    [claimed] = store.delivery_claim(lease_seconds=30)
    retry = store.delivery_record_attempt(
        claimed.id, claimed.lease_token, outcome=AttemptOutcome.FAILURE, duration=0.5,
        status_code=503, error="receiver answered HTTP 503", retry_in=1.0)
    assert retry is not None and retry.state is DeliveryState.PENDING
    assert (retry.attempts, retry.round_attempts, retry.lease_token) == (1, 1, None)
    assert retry.last_error == "receiver answered HTTP 503"
    assert store.delivery_claim(lease_seconds=30) == []  # not due for 1 s
    time.sleep(1.1)
    [again] = store.delivery_claim(lease_seconds=30)
    failed = store.delivery_record_attempt(
        again.id, again.lease_token, outcome=AttemptOutcome.REFUSED, duration=0.0,
        error="host 'x' resolves to 10.0.0.1: private", retry_in=None)
    assert failed is not None and failed.state is DeliveryState.FAILED
    assert failed.attempts == 2 and failed.last_error.startswith("host 'x'")
    assert store.delivery_claim(lease_seconds=30) == []  # given up: never claimed again
    attempts = store.delivery_attempt_list("p", record.id)
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [
        (1, AttemptOutcome.FAILURE, 503), (2, AttemptOutcome.REFUSED, None)]


def test_a_replay_starts_a_new_round_unless_the_delivery_is_in_flight(
    store: SqlJobStore, make_export
):
    record, delivery = _failed(store, make_export)
    [claimed] = store.delivery_claim(lease_seconds=30)
    # In flight: the replay leaves it to its sender.
    in_flight = store.delivery_replay("p", record.id, delivery.id)
    assert in_flight is not None and in_flight.lease_token == claimed.lease_token
    store.delivery_record_attempt(claimed.id, claimed.lease_token,
                                  outcome=AttemptOutcome.FAILURE, duration=0.1, retry_in=None)
    replayed = store.delivery_replay("p", record.id, delivery.id)
    assert replayed is not None and replayed.state is DeliveryState.PENDING
    assert (replayed.attempts, replayed.round_attempts) == (1, 0)
    assert replayed.round_started_at > delivery.created_at
    [again] = store.delivery_claim(lease_seconds=30)
    assert again.id == delivery.id  # same id: the same webhook-id goes out
    # Another project, another export: nothing.
    assert store.delivery_replay("q", record.id, delivery.id) is None
    assert store.delivery_replay("p", "exp_other", delivery.id) is None


def test_deliveries_are_listed_per_project(store: SqlJobStore, make_export):
    record, delivery = _failed(store, make_export, "p")
    assert store.delivery_list("q", record.id) == []
    assert store.delivery_attempt_list("q", record.id) == []
    assert store.delivery_get("q", delivery.id) is None
    assert store.delivery_get("p", delivery.id) == delivery
    assert store.delivery_get(None, delivery.id) == delivery


def test_deleting_the_export_removes_its_deliveries_and_attempts(
    store: SqlJobStore, make_export
):
    record, delivery = _failed(store, make_export)
    [claimed] = store.delivery_claim(lease_seconds=30)
    store.delivery_record_attempt(claimed.id, claimed.lease_token,
                                  outcome=AttemptOutcome.SUCCESS, duration=0.1)
    assert store.export_delete("p", record.id)
    assert store.delivery_get(None, delivery.id) is None


def test_concurrent_claimers_never_share_a_delivery(store: SqlJobStore, make_export):
    for _ in range(24):
        _failed(store, make_export)
    got: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def claim() -> None:
        start.wait()
        while batch := store.delivery_claim(lease_seconds=30, limit=3):
            with lock:
                got.extend(d.id for d in batch)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 24 and max(Counter(got).values()) == 1


def test_the_first_secret_is_made_once(store: SqlJobStore):
    assert store.webhook_secret_list("p") == []
    [first] = store.webhook_secret_ensure("p", "whsec_AAAA")
    assert (first.project, first.generation, first.secret, first.expires_at) == (
        "p", 1, "whsec_AAAA", None)
    assert store.webhook_secret_ensure("p", "whsec_BBBB") == [first]
    assert store.webhook_secret_list("p") == [first]
    assert "whsec_AAAA" not in repr(first)


def test_concurrent_first_secrets_leave_one(store: SqlJobStore):
    results: list[list[str]] = []
    start = threading.Barrier(4)

    def ensure(i: int) -> None:
        start.wait()
        results.append([s.secret for s in store.webhook_secret_ensure("p", f"whsec_{i}")])

    threads = [threading.Thread(target=ensure, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and len({tuple(r) for r in results}) == 1
    assert len(results[0]) == 1


def test_rotation_keeps_the_previous_secret_for_the_grace(store: SqlJobStore):
    store.webhook_secret_ensure("p", "whsec_one")
    active = store.webhook_secret_rotate("p", "whsec_two", previous_expire_in=1.0)
    assert [(s.secret, s.generation) for s in active] == [("whsec_two", 2), ("whsec_one", 1)]
    assert active[0].expires_at is None and active[1].expires_at > store.now()
    time.sleep(1.1)
    assert [s.secret for s in store.webhook_secret_list("p")] == ["whsec_two"]
    # Immediate rotation: only the new one signs; the expired ones are purged.
    active = store.webhook_secret_rotate("p", "whsec_three", previous_expire_in=0)
    assert [(s.secret, s.generation) for s in active] == [("whsec_three", 3)]
    with store.engine.connect() as conn:
        kept = conn.execute(sa.text("SELECT count(*) FROM webhook_secrets")).scalar_one()
    assert kept <= 2
    # Rotating a project that never had a secret makes its first one.
    assert [s.generation for s in store.webhook_secret_rotate(
        "fresh", "whsec_x", previous_expire_in=60)] == [1]
    # Another project is untouched.
    assert [s.secret for s in store.webhook_secret_list("p")] == ["whsec_three"]


def test_a_second_rotation_does_not_extend_an_earlier_expiry(store: SqlJobStore):
    store.webhook_secret_ensure("p", "whsec_one")
    store.webhook_secret_rotate("p", "whsec_two", previous_expire_in=1.0)
    active = store.webhook_secret_rotate("p", "whsec_three", previous_expire_in=3600)
    by_secret = {s.secret: s.expires_at for s in active}
    assert by_secret["whsec_three"] is None
    assert by_secret["whsec_one"] < by_secret["whsec_two"]
    time.sleep(1.1)
    assert [s.secret for s in store.webhook_secret_list("p")] == ["whsec_three", "whsec_two"]

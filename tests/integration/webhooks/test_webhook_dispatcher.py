"""The dispatcher against a real receiver on 127.0.0.1 and a real store.

Loopback is allowed by the explicit test setting ``webhooks.allow_loopback``; where a
test needs a host *name*, the dispatcher's resolver seam maps it to an address (a
fake DNS), and the name does not exist in real DNS, so the request can only have
reached the receiver through the pinned address.
"""

from __future__ import annotations

import itertools
import json
import ssl
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook
from webhook_receiver import Receiver, make_certificates, running_receiver
from webhook_support import MakeSettings, ended_export, only_delivery, wait_for

from egress.domain.deliveries import AttemptOutcome, DeliveryState
from egress.store.schema import deliveries
from egress.store.sql import SqlJobStore
from egress.webhooks.dispatcher import Dispatcher


def drain(dispatcher: Dispatcher, store: SqlJobStore, export_id: str, project: str = "p",
          timeout: float = 15.0) -> None:
    """Run the dispatcher until the export's deliveries are no longer pending."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        dispatcher.run_once()
        if all(d.state is not DeliveryState.PENDING
               for d in store.delivery_list(project, export_id)):
            return
        time.sleep(0.02)
    raise AssertionError("deliveries still pending")


def test_an_event_arrives_signed_and_verifies(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    export = ended_export(store, receiver.url("/hooks/egress?tenant=7"))
    delivery = only_delivery(store, export)
    dispatcher = Dispatcher(store, make_settings(), name="w1")
    drain(dispatcher, store, export.id)

    [got] = receiver.requests
    assert got.path == "/hooks/egress?tenant=7"
    [secret] = store.webhook_secret_list("p")
    event = Webhook(secret.secret).verify(got.body, got.headers)
    assert event["type"] == "export.failed"
    assert event["data"] == {"id": export.id, "project": "p", "state": "failed",
                             "error": "boom", "finished_at": event["data"]["finished_at"]}
    assert got.headers["webhook-id"] == delivery.id
    assert got.headers["content-type"] == "application/json"
    assert got.headers["host"] == f"127.0.0.1:{receiver.port}"
    done = only_delivery(store, export)
    assert (done.state, done.attempts, done.last_error) == (DeliveryState.DELIVERED, 1, None)
    [attempt] = store.delivery_attempt_list("p", export.id)
    assert (attempt.outcome, attempt.status_code, attempt.address, attempt.worker) == (
        AttemptOutcome.SUCCESS, 204, "127.0.0.1", "w1")
    assert 0 <= attempt.duration < 2


def test_three_failures_then_success_keep_the_same_webhook_id(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    receiver.script = [500, 503, 429]
    export = ended_export(store, receiver.url(), how="cancel")
    delivery = only_delivery(store, export)
    dispatcher = Dispatcher(store, make_settings(schedule=(0.1, 0.2)))
    drain(dispatcher, store, export.id)

    assert len(receiver.requests) == 4
    assert {r.headers["webhook-id"] for r in receiver.requests} == {delivery.id}
    assert len({r.body for r in receiver.requests}) == 1  # the same event each time
    [secret] = store.webhook_secret_list("p")
    for r in receiver.requests:
        assert Webhook(secret.secret).verify(r.body, r.headers)["type"] == "export.cancelled"
    gaps = [b.at - a.at for a, b in zip(receiver.requests, receiver.requests[1:], strict=False)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.2  # the schedule, last repeats
    attempts = store.delivery_attempt_list("p", export.id)
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [
        (1, AttemptOutcome.FAILURE, 500), (2, AttemptOutcome.FAILURE, 503),
        (3, AttemptOutcome.FAILURE, 429), (4, AttemptOutcome.SUCCESS, 204)]
    assert attempts[0].error == "receiver answered HTTP 500"
    assert only_delivery(store, export).state is DeliveryState.DELIVERED


def test_a_redirect_is_not_followed_and_counts_as_a_failure(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    receiver.default = ("redirect", 302, receiver.url("/elsewhere"))
    export = ended_export(sqlite_store, receiver.url("/hook"))
    dispatcher = Dispatcher(sqlite_store, make_settings(give_up_after=0.5))
    drain(dispatcher, sqlite_store, export.id)

    assert receiver.requests and {r.path for r in receiver.requests} == {"/hook"}
    attempts = sqlite_store.delivery_attempt_list("p", export.id)
    assert all(a.outcome is AttemptOutcome.FAILURE and a.status_code == 302 for a in attempts)
    assert "redirect 302" in attempts[0].error and "not followed" in attempts[0].error
    assert receiver.url("/elsewhere") in attempts[0].error
    assert only_delivery(sqlite_store, export).state is DeliveryState.FAILED


def test_a_delivery_gives_up_when_the_schedule_runs_out(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    receiver.default = 500
    export = ended_export(sqlite_store, receiver.url())
    delay, limit = 0.5, 2.0
    dispatcher = Dispatcher(sqlite_store, make_settings(schedule=(delay,), give_up_after=limit))
    drain(dispatcher, sqlite_store, export.id)
    done = only_delivery(sqlite_store, export)
    attempts = sqlite_store.delivery_attempt_list("p", export.id)
    # at least two (four on a quiet machine; an attempt took 0.9 s on a loaded one)
    assert done.state is DeliveryState.FAILED and done.attempts == len(attempts) >= 2
    assert len(receiver.requests) == done.attempts
    assert done.last_error == "receiver answered HTTP 500"
    # Every attempt was due within the limit, and none began early: an attempt is due
    # the delay after the one before ended (the dispatcher's rule). When it then began
    # is the machine's business: the drain loop polls every 20 ms, and CI once started
    # one more than 0.25 s late; the next one would have been due past the limit.
    for before, after in itertools.pairwise(attempts):
        due = before.at + before.duration + delay
        assert due - done.created_at <= limit + 0.05
        assert after.at >= due - 0.05
    last = attempts[-1]
    assert last.at + last.duration + delay - done.created_at > limit - 0.01


def test_a_rotated_secret_signs_beside_the_new_one(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    [old] = store.webhook_secret_ensure("p", "whsec_" + "A" * 43 + "=")
    [new, previous] = store.webhook_secret_rotate("p", "whsec_" + "B" * 43 + "=",
                                                  previous_expire_in=3600)
    assert previous.secret == old.secret
    export = ended_export(store, receiver.url())
    drain(Dispatcher(store, make_settings()), store, export.id)
    [got] = receiver.requests
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    Webhook(old.secret).verify(got.body, got.headers)
    Webhook(new.secret).verify(got.body, got.headers)
    # After an immediate rotation only the newest secret signs.
    [newest] = store.webhook_secret_rotate("p", "whsec_" + "C" * 43 + "=", previous_expire_in=0)
    export2 = ended_export(store, receiver.url())
    drain(Dispatcher(store, make_settings()), store, export2.id)
    last = receiver.requests[-1]
    assert len(last.headers["webhook-signature"].split(" ")) == 1
    Webhook(newest.secret).verify(last.body, last.headers)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(new.secret).verify(last.body, last.headers)


#: Literal URLs of every blocked class (stored directly, as if the guard at create time
#: had been configured differently): refused at delivery for good.
BLOCKED_URLS = [
    ("http://127.0.0.1:{port}/", "loopback"),
    ("http://[::1]:{port}/", "loopback"),
    ("http://2130706433:{port}/", "loopback"),
    ("http://0x7f000001:{port}/", "loopback"),
    ("http://0177.0.0.1:{port}/", "loopback"),
    ("http://127.1:{port}/", "loopback"),
    ("http://[::ffff:127.0.0.1]:{port}/", "IPv4-mapped"),
    ("http://localhost:{port}/", "loopback name"),
    ("http://10.0.0.1/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://[fd00::1]/", "private"),
    ("http://169.254.10.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://100.64.1.1/", "CGNAT"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://224.0.0.1/", "multicast"),
    ("http://0.0.0.0:{port}/", "unspecified"),
    ("http://240.0.0.1/", "reserved"),
    ("http://[2002:a00:1::1]/", "6to4"),
]


def test_every_blocked_literal_is_refused_at_delivery_with_its_reason(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    exports = [(ended_export(store, url.format(port=receiver.port)), reason)
               for url, reason in BLOCKED_URLS]
    # Loopback not allowed here: the receiver on 127.0.0.1 must see nothing.
    dispatcher = Dispatcher(store, make_settings(allow_loopback=False, concurrency=8))
    while dispatcher.run_once():
        pass
    for export, reason in exports:
        done = only_delivery(store, export)
        [attempt] = store.delivery_attempt_list("p", export.id)
        assert attempt.outcome is AttemptOutcome.REFUSED, export.callback_url
        assert reason in attempt.error and attempt.status_code is None, attempt.error
        assert done.state is DeliveryState.FAILED  # a literal can never become allowed
    assert receiver.requests == []


#: Host names and what the fake DNS answers for them.
BLOCKED_NAMES = {
    "loopback.test": ("127.0.0.1", "loopback"),
    "loopback6.test": ("::1", "loopback"),
    "mapped.test": ("::ffff:127.0.0.1", "IPv4-mapped IPv6 address embedding 127.0.0.1"),
    "private.test": ("10.20.30.40", "private"),
    "ula.test": ("fd12::1", "private"),
    "linklocal.test": ("169.254.3.3", "link-local"),
    "linklocal6.test": ("fe80::abcd", "link-local"),
    "cgnat.test": ("100.100.0.1", "CGNAT"),
    "metadata.test": ("169.254.169.254", "cloud metadata"),
    "metadata6.test": ("fd00:ec2::254", "cloud metadata"),
    "multicast.test": ("239.255.255.250", "multicast"),
    "unspecified.test": ("0.0.0.0", "unspecified"),
    "reserved.test": ("198.18.0.1", "reserved"),
    "nat64.test": ("64:ff9b::a00:1", "NAT64"),
    "teredo.test": ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo"),
}


def test_every_blocked_class_behind_a_name_is_refused_with_its_reason(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    asked: list[str] = []

    def fake_dns(host: str, port: int) -> list[str]:
        asked.append(host)
        return [BLOCKED_NAMES[host][0]]

    exports = {host: ended_export(store, f"http://{host}:{receiver.port}/hook")
               for host in BLOCKED_NAMES}
    dispatcher = Dispatcher(
        store, make_settings(allow_loopback=False, concurrency=8, schedule=(60,)),
        resolver=fake_dns)
    while dispatcher.run_once():
        pass
    for host, export in exports.items():
        _, reason = BLOCKED_NAMES[host]
        [attempt] = store.delivery_attempt_list("p", export.id)
        assert attempt.outcome is AttemptOutcome.REFUSED
        assert f"host {host!r} resolves to" in attempt.error and reason in attempt.error
        done = only_delivery(store, export)
        # The name may point elsewhere later: retried on the schedule, not given up.
        assert done.state is DeliveryState.PENDING and done.last_error == attempt.error
    assert sorted(asked) == sorted(BLOCKED_NAMES)
    assert receiver.requests == []


def test_the_connection_goes_to_the_checked_address_not_a_second_lookup(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    """DNS rebinding: the first answer passes the guard, any later one would not. The
    name exists in no real DNS, so the request reached the receiver only through the
    address the guard checked."""
    answers = iter([["127.0.0.1"], ["10.0.0.1"], ["10.0.0.1"]])
    asked: list[str] = []

    def rebinding_dns(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    export = ended_export(sqlite_store, f"http://hooks.rebind.invalid:{receiver.port}/h")
    dispatcher = Dispatcher(sqlite_store, make_settings(), resolver=rebinding_dns)
    drain(dispatcher, sqlite_store, export.id)
    assert asked == ["hooks.rebind.invalid"]
    [got] = receiver.requests
    assert got.headers["host"] == f"hooks.rebind.invalid:{receiver.port}"
    assert only_delivery(sqlite_store, export).state is DeliveryState.DELIVERED


def test_https_pins_the_address_and_checks_the_certificate_against_the_name(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, tmp_path: Path
):
    ca, cert, key = make_certificates(tmp_path, "hooks.example.test")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(ca))
    with running_receiver(server_ctx) as tls:
        good = ended_export(sqlite_store, f"https://hooks.example.test:{tls.port}/tls")
        wrong = ended_export(sqlite_store, f"https://other.example.test:{tls.port}/tls")
        dispatcher = Dispatcher(sqlite_store, make_settings(give_up_after=0.01),
                                resolver=lambda host, port: ["127.0.0.1"],
                                ssl_context=client_ctx)
        drain(dispatcher, sqlite_store, good.id)
        drain(dispatcher, sqlite_store, wrong.id)
        [got] = tls.requests
        assert got.path == "/tls" and got.headers["host"] == f"hooks.example.test:{tls.port}"
        assert "hooks.example.test" in tls.sni
        assert only_delivery(sqlite_store, good).state is DeliveryState.DELIVERED
        [attempt] = sqlite_store.delivery_attempt_list("p", wrong.id)
        assert attempt.outcome is AttemptOutcome.FAILURE
        assert "certificate" in attempt.error.lower() or "hostname" in attempt.error.lower()


def test_a_slow_or_dripping_receiver_is_cut_at_the_timeout(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    receiver.script = [("sleep", 3, 200), ("drip",)]
    slow = ended_export(sqlite_store, receiver.url("/slow"))
    drip = ended_export(sqlite_store, receiver.url("/drip"))
    settings = make_settings(timeout=0.8, give_up_after=0.01, concurrency=1)
    dispatcher = Dispatcher(sqlite_store, settings)
    for export in (slow, drip):
        started = time.monotonic()
        drain(dispatcher, sqlite_store, export.id)
        assert time.monotonic() - started < 2.5
        [attempt] = sqlite_store.delivery_attempt_list("p", export.id)
        assert attempt.outcome is AttemptOutcome.FAILURE
        assert attempt.error.startswith("no answer within 0.8 s"), attempt.error
        assert 0.7 <= attempt.duration < 1.5


def test_a_refused_connection_is_a_failure_that_is_retried(
    sqlite_store: SqlJobStore, make_settings: MakeSettings
):
    with running_receiver() as gone:
        url = gone.url()
    export = ended_export(sqlite_store, url)  # nothing listens there any more
    Dispatcher(sqlite_store, make_settings(schedule=(60,))).run_once()
    [attempt] = sqlite_store.delivery_attempt_list("p", export.id)
    assert attempt.outcome is AttemptOutcome.FAILURE and "ConnectError" in attempt.error
    done = only_delivery(sqlite_store, export)
    assert done.state is DeliveryState.PENDING and done.next_attempt_at > sqlite_store.now() + 50


def test_two_dispatchers_send_each_event_once(
    store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    receiver.script = [("sleep", 0.05, 200)] * 20
    exports = [ended_export(store, receiver.url()) for _ in range(12)]
    # a lease far longer than an attempt even on a loaded machine: a send that outlives
    # its lease is sent again by design (at least once), which is not what this tests
    settings = make_settings(concurrency=3, lease_seconds=30.0)
    dispatchers = [Dispatcher(store, settings, name=f"w{i}") for i in range(2)]
    start = threading.Barrier(2)

    def run(dispatcher: Dispatcher) -> None:
        start.wait()
        while dispatcher.run_once():
            pass

    threads = [threading.Thread(target=run, args=(d,)) for d in dispatchers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for d in dispatchers:
        d.close()
    ids = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(ids) == 12 and set(ids.values()) == {1}
    for export in exports:
        assert only_delivery(store, export).state is DeliveryState.DELIVERED


def test_the_payload_of_a_completed_export_names_it(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    """export.completed comes from the store's completion (the worker test runs a real
    export; here the store call alone)."""
    export = ended_export(sqlite_store, receiver.url(), how="cancel")
    drain(Dispatcher(sqlite_store, make_settings()), sqlite_store, export.id)
    body = json.loads(receiver.requests[0].body)
    assert body["type"] == "export.cancelled" and body["data"]["id"] == export.id
    assert body["timestamp"].endswith("Z")
    assert wait_for(lambda: only_delivery(sqlite_store, export).state
                    is DeliveryState.DELIVERED)


def test_an_unexpected_error_is_recorded_not_retried_silently(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    export = ended_export(sqlite_store, receiver.url())
    with sqlite_store.engine.begin() as conn:  # an outbox row no store op would write
        conn.execute(sa.update(deliveries).values(payload={"no": "type"}))
    Dispatcher(sqlite_store, make_settings(schedule=(60,))).run_once()
    [attempt] = sqlite_store.delivery_attempt_list("p", export.id)
    assert attempt.outcome is AttemptOutcome.FAILURE
    assert attempt.error == "internal error (KeyError); see the worker's log"
    assert receiver.requests == []


def test_a_burst_to_one_host_is_sent_at_the_per_host_rate(
    sqlite_store: SqlJobStore, make_settings: MakeSettings, receiver: Receiver
):
    """12 events for one receiver at once, 4 per second with bursts of 2: they arrive no
    faster than that, each in one attempt (waiting its turn is not a failed attempt)."""
    rate, burst = 4.0, 2
    exports = [ended_export(sqlite_store, receiver.url()) for _ in range(12)]
    dispatcher = Dispatcher(sqlite_store, make_settings(per_host_rate=rate,
                                                        per_host_burst=burst))
    end = time.monotonic() + 20
    while len(receiver.requests) < 12 and time.monotonic() < end:
        dispatcher.run_once()
        time.sleep(0.01)
    dispatcher.close()
    arrivals = sorted(r.at for r in receiver.requests)
    assert len(arrivals) == 12
    # any window holds at most burst + rate·length, give or take two requests delayed on
    # their way by a loaded machine (without the limit all 12 arrive within ~0.1 s)
    for i, first in enumerate(arrivals):
        for j in range(i + 1, len(arrivals)):
            assert j - i + 1 <= burst + rate * (arrivals[j] - first) + 2, arrivals
    assert arrivals[-1] - arrivals[0] >= (12 - burst) / rate - 0.5
    for export in exports:
        done = only_delivery(sqlite_store, export)
        assert (done.state, done.attempts) == (DeliveryState.DELIVERED, 1)

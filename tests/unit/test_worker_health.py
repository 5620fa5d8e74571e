"""The worker's liveness bookkeeping (worker/health.py) and its probe server's answers
(worker/probes.py) on a real socket."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from egress.exceptions import StoreError
from egress.worker.health import Heartbeats, Stale
from egress.worker.probes import ProbePortError, ProbeServer
from egress.worker.retry import retry_reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_goes_stale_past_the_bound_plus_the_allowance_of_its_last_beat() -> None:
    clock = Clock()
    beats = Heartbeats(clock)
    beats.beat("main", allowance=0.5)
    beats.beat("slot-0")
    beats.beat("reconciler", allowance=2)
    assert beats.stale(10) == []

    clock.now += 10.4
    assert beats.stale(10) == [Stale("slot-0", pytest.approx(10.4), 10)]
    clock.now += 1.0  # 11.4 s: main (10.5 allowed) too, the oldest first, then by name
    assert [s.loop for s in beats.stale(10)] == ["main", "slot-0"]

    # a slot that starts a slice may take slice_seconds more before it beats again
    beats.beat("slot-0", allowance=20)
    clock.now += 29
    assert "slot-0" not in [s.loop for s in beats.stale(10)]
    clock.now += 2  # 31 s > 10 + 20
    stale = {s.loop: s for s in beats.stale(10)}
    assert stale["slot-0"].age == pytest.approx(31) and stale["slot-0"].limit == 30
    assert set(stale) == {"main", "slot-0", "reconciler"}

    # a beat makes it fresh again; a loop that ended on purpose is no longer watched
    beats.beat("slot-0")
    beats.done("main")
    assert [s.loop for s in beats.stale(10)] == ["reconciler"]
    assert set(beats.loops()) == {"slot-0", "reconciler"}
    assert beats.loops()["slot-0"] == 0


class FakeStore:
    """Only what /readyz asks; the probe server's store answers vary per test."""

    def __init__(self) -> None:
        self.answer: Any = True

    def schema_current(self) -> bool:
        if isinstance(self.answer, Exception):
            raise self.answer
        return bool(self.answer)


def _get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_probe_server_answers_health_readiness_and_metrics() -> None:
    clock = Clock()
    beats = Heartbeats(clock)
    store = FakeStore()
    server = ProbeServer(store, beats, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                         stale_seconds=5).start()
    try:
        beats.beat("main")
        beats.beat("slot-0")
        status, _, body = _get(server.port, "/healthz")
        assert status == 200 and json.loads(body)["loops"] == {"main": 0, "slot-0": 0}

        clock.now += 6
        beats.beat("main")
        status, ctype, body = _get(server.port, "/healthz")
        problem = json.loads(body)
        assert status == 503 and ctype == "application/problem+json"
        assert problem["stale"] == [{"loop": "slot-0", "age_seconds": 6, "limit_seconds": 5}]
        assert "slot-0 (6s)" in problem["detail"]

        assert _get(server.port, "/readyz")[0] == 200
        store.answer = False
        status, _, body = _get(server.port, "/readyz")
        assert status == 503 and "egress migrate" in json.loads(body)["detail"]
        store.answer = StoreError("job store unavailable: connection refused")
        status, _, body = _get(server.port, "/readyz")
        assert status == 503 and json.loads(body)["detail"] == "the job store cannot be reached"

        status, ctype, body = _get(server.port, "/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        assert b"egress_slices_total" in body and b"egress_lease_losses_total" in body
        assert _get(server.port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_the_probe_server_stops_without_waiting_out_a_long_poll() -> None:
    # serve_forever() notices a stop only at its next poll, and a stop just after a
    # request waits out nearly a whole one: at the standard library's 0.5 s these ten
    # stops took 5.8 s
    took = 0.0
    for _ in range(10):
        server = ProbeServer(FakeStore(), Heartbeats(), host="127.0.0.1",  # type: ignore[arg-type]
                             port=0, stale_seconds=5).start()
        assert _get(server.port, "/healthz")[0] == 200
        started = time.perf_counter()
        server.stop()
        took += time.perf_counter() - started
    assert took < 1.5, f"ten stops took {took:.2f} s"


def test_a_port_in_use_is_one_clear_error_naming_the_port_and_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ProbeServer(FakeStore(), Heartbeats(), host="127.0.0.1",  # type: ignore[arg-type]
                             port=port, stale_seconds=5)
        with pytest.raises(ProbePortError) as caught:
            server.start()
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "in use" in message
    assert "worker.metrics_port" in message and "\n" not in message


def test_retry_reasons_are_a_few_fixed_words() -> None:
    from egress.exceptions import SinkUnavailableError, SourceUnavailableError

    assert retry_reason(SourceUnavailableError("x")) == "source"
    assert retry_reason(SinkUnavailableError("x")) == "destination"
    assert retry_reason(StoreError("x")) == "store"
    assert retry_reason(TimeoutError("x")) == "timeout"
    assert retry_reason(ConnectionResetError("x")) == "connection"
    assert retry_reason(ValueError("x")) == "other"

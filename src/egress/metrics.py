"""Prometheus metrics: every name and label of egress is defined here (docs/metrics.md).

Registered in the default registry on import of this module. The API serves them at
``/metrics`` (``api/routes/health.py``); ``egress worker`` at ``/metrics`` of its probe
server (``worker/probes.py``). Label values come from small fixed sets (states,
outcomes, formats, destination types, error kinds), never from ids, names or URLs.

The counters and histograms count what happened in this process. The queue and state
gauges (:class:`StoreStats`) are read from the job store when scraped, at most once
every ``StoreStats.max_age`` seconds, so every process attached to a store shows the
same fleet-wide numbers: sum the counters across processes, never these gauges.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from egress.domain.jobs import ExportState, TaskState

log = logging.getLogger(__name__)

# --- the API ------------------------------------------------------------------------------

API_REQUESTS = Counter("egress_api_requests_total", "API requests answered",
                       ["method", "route", "status"])
API_LATENCY = Histogram("egress_api_request_seconds", "Time to the end of the API response",
                        ["method", "route"],
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))

# --- workers: claiming and slices -------------------------------------------------------

CLAIM_SECONDS = Histogram(
    "egress_claim_duration_seconds",
    "Time of one claim call to the job store (claimed: it returned a task; empty: nothing "
    "was ready; error: the store failed)",
    ["result"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SLICES = Counter("egress_slices_total", "Slices run by this worker", ["outcome"])
SLICE_SECONDS = Histogram(
    "egress_slice_duration_seconds",
    "Time a slot spent on one claimed task: plan, read, encode, commit, requeue or finish",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 15, 20, 25, 30, 45, 60, 120, 300, 600),
)
ROWS_EXPORTED = Counter(
    "egress_rows_exported_total",
    "Rows in committed parts (a part redone after a lost lease or a crash counts again)",
    ["format", "destination_type"],
)
BYTES_EXPORTED = Counter(
    "egress_bytes_exported_total",
    "Bytes (as stored, after compression) of committed parts",
    ["format", "destination_type"],
)
RETRIES = Counter(
    "egress_retries_total",
    "Slices that failed with a transient error and were queued again with backoff",
    ["reason"],
)

# --- workers: leases and recovery ---------------------------------------------------------

LEASE_RENEWALS = Counter(
    "egress_lease_renewals_total",
    "Lease renewals (heartbeats) of running tasks (ok: renewed; error: the store could "
    "not be reached; a renewal refused is a loss, egress_lease_losses_total)",
    ["result"],
)
LEASE_LOSSES = Counter(
    "egress_lease_losses_total",
    "Leases a worker lost while running a task (refused: the store no longer knew the "
    "token; unreachable: no renewal for a whole lease; fenced: a commit, finish or requeue "
    "changed no row)",
    ["reason"],
)
STALE_CLAIMS_RESET = Counter(
    "egress_stale_claims_reset_total",
    "Tasks requeued by the reconciler: their lease expired, or (remote engines) they were "
    "claimed and never submitted",
)

# --- webhooks -----------------------------------------------------------------------------

WEBHOOK_ATTEMPTS = Counter("egress_webhook_attempts_total", "Webhook delivery attempts made",
                           ["outcome"])
WEBHOOK_DELIVERIES = Counter(
    "egress_webhook_deliveries_total",
    "Webhook deliveries that ended (delivered: a 2xx answer; failed: given up)",
    ["outcome"],
)
WEBHOOK_POSTPONED = Counter(
    "egress_webhook_postponed_total",
    "Deliveries put back unsent: their receiving host's rate was reached",
)

#: The label values known in advance, so that each series exists (at 0) from the start:
#: an alert on ``rate(…)`` or ``increase(…)`` needs the series before the first event.
SLICE_OUTCOMES = ("requeued", "done", "retry", "failed", "lost", "cancelled", "waiting")
RETRY_REASONS = ("source", "destination", "store", "connection", "timeout", "database",
                 "locked", "s3", "other")
for _counter, _values in (
    (CLAIM_SECONDS, ("claimed", "empty", "error")),
    (SLICES, SLICE_OUTCOMES),
    (RETRIES, RETRY_REASONS),
    (LEASE_RENEWALS, ("ok", "error")),
    (LEASE_LOSSES, ("refused", "unreachable", "fenced")),
    (WEBHOOK_ATTEMPTS, ("success", "failure", "refused")),
    (WEBHOOK_DELIVERIES, ("delivered", "failed")),
):
    for _value in _values:
        _counter.labels(_value)

# --- the job store, read at scrape time ---------------------------------------------------


class _StatsSource(Protocol):
    def queue_stats(self) -> Any: ...


class StoreStats(Collector):
    """Exports and tasks by state, ready tasks and the oldest one's age, read from the
    store attached last (``attach``) with one query, cached for ``max_age`` seconds.

    Nothing attached, or the store failing: these series are left out of the scrape
    (``/readyz`` says why); the scrape itself never fails on their account.
    """

    def __init__(self, max_age: float = 5.0) -> None:
        self.max_age = max_age
        self._store: _StatsSource | None = None
        self._lock = threading.Lock()
        self._cached: Any = None
        self._read_at = float("-inf")

    def attach(self, store: _StatsSource) -> None:
        with self._lock:
            self._store, self._cached, self._read_at = store, None, float("-inf")

    def detach(self, store: _StatsSource) -> None:
        with self._lock:
            if self._store is store:
                self._store, self._cached = None, None

    def _stats(self) -> Any:
        # one query at a time: concurrent scrapes wait for it and share its answer
        with self._lock:
            if self._store is None:
                return None
            if time.monotonic() - self._read_at < self.max_age:
                return self._cached
            try:
                self._cached = self._store.queue_stats()
            except Exception as exc:  # the store is away: leave the gauges out this time
                log.warning("store statistics unavailable", extra={"error": str(exc)})
                self._cached = None
            self._read_at = time.monotonic()
            return self._cached

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families(None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self._stats()
        if stats is not None:
            yield from self._families(stats)

    @staticmethod
    def _families(stats: Any) -> Iterator[GaugeMetricFamily]:
        exports = GaugeMetricFamily("egress_exports", "Exports in the job store by state",
                                    labels=["state"])
        tasks = GaugeMetricFamily("egress_tasks", "Tasks in the job store by state",
                                  labels=["state"])
        ready = GaugeMetricFamily(
            "egress_tasks_ready", "Queue depth: queued tasks whose run_after has come")
        oldest = GaugeMetricFamily(
            "egress_tasks_ready_oldest_age_seconds",
            "Seconds the oldest ready task has been waiting for a worker (0: none ready)")
        if stats is not None:
            for e in ExportState:
                exports.add_metric([e.value], stats.exports.get(e.value, 0))
            for t in TaskState:
                tasks.add_metric([t.value], stats.tasks.get(t.value, 0))
            ready.add_metric([], stats.ready)
            oldest.add_metric([], stats.oldest_ready_seconds)
        yield from (exports, tasks, ready, oldest)


STORE_STATS = StoreStats()
REGISTRY.register(STORE_STATS)


def exposition() -> tuple[bytes, str]:
    """Every metric of this process in the Prometheus text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

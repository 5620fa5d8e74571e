"""Prometheus metrics. Registered on import of this module only; served by the API."""

from __future__ import annotations

from prometheus_client import Counter

STALE_CLAIMS_RESET = Counter(
    "egress_stale_claims_reset_total",
    "Tasks requeued by the reconciler: their lease expired, or (remote engines) they were "
    "claimed and never submitted",
)
SLICES = Counter("egress_slices_total", "Slices run by this worker", ["outcome"])

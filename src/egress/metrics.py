"""Prometheus metrics. Registered on import of this module only; served by the API."""

from __future__ import annotations

from prometheus_client import Counter

STALE_CLAIMS_RESET = Counter(
    "stale_claims_reset_total", "Tasks requeued by the reconciler because their lease expired"
)
SLICES = Counter("egress_slices_total", "Slices run by this worker", ["outcome"])

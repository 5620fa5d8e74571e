"""Keeping a lease alive while a slice runs, and noticing when it is lost or cancelled."""

from __future__ import annotations

import logging
import threading
import time

from egress.logs import in_context
from egress.metrics import LEASE_LOSSES, LEASE_RENEWALS
from egress.store.base import WorkerStore

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one task's lease every ``every`` seconds on a background thread.

    ``lost`` turns true when the store says the token no longer holds the lease, or when
    the lease could not be renewed for longer than it lasts (the store was unreachable:
    another worker may own the task by now). ``cancelled`` turns true when the export
    was cancelled or failed.
    """

    def __init__(
        self, store: WorkerStore, task_id: str, token: str, lease_seconds: float, every: float
    ) -> None:
        self.store, self.task_id, self.token = store, task_id, token
        self.lease_seconds, self.every = lease_seconds, every
        self.lost = False
        self.cancelled = False
        self._stop = threading.Event()
        self._last_renewal = time.monotonic()
        self._thread = threading.Thread(target=in_context(self._run), name=f"lease-{task_id}",
                                        daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                beat = self.store.task_heartbeat(self.task_id, self.token, self.lease_seconds)
            except Exception as exc:  # the store is away; the lease runs out on its own
                LEASE_RENEWALS.labels("error").inc()
                log.warning("lease renewal failed", extra={"task": self.task_id, "error": str(exc)})
                if time.monotonic() - self._last_renewal > self.lease_seconds:
                    LEASE_LOSSES.labels("unreachable").inc()
                    self.lost = True
                    return
                continue
            self._last_renewal = time.monotonic()
            if beat.cancel_requested:
                self.cancelled = True
            if not beat.alive:
                LEASE_LOSSES.labels("refused").inc()
                self.lost = True
                return
            LEASE_RENEWALS.labels("ok").inc()

"""Liveness bookkeeping of a worker's loops, for ``/healthz`` (``worker/probes.py``).

Every loop thread of a worker — the main loop, each slot, the reconciler, the remote
poller, the webhook dispatcher — calls :meth:`Heartbeats.beat` once per iteration. A
loop is *stale* when its last beat is older than the bound (``worker.health_stale_seconds``)
plus the allowance that beat asked for: a slot that starts a slice beats with an
allowance of ``slice_seconds`` (a slice ends after about that long), so a slot stays
alive for as long as its slice is within its bounds, and goes stale when it is stuck.

A loop stuck in a call that never returns (a claim waiting on a lock, a hung socket)
stops beating and goes stale; so does a thread that died. A loop whose calls fail fast
(the store is down) keeps beating: that is ``/readyz``'s business, and restarting the
worker would not bring the store back. A loop that ends because the worker stops says
so (:meth:`Heartbeats.done`) and is no longer watched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Stale:
    """A loop that has not beaten in time."""

    loop: str
    #: seconds since its last beat
    age: float
    #: seconds it was allowed (the bound plus its last beat's allowance)
    limit: float


class Heartbeats:
    """The time of each loop's last iteration (monotonic clock), thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        #: loop → (time of its last beat, extra seconds that beat allowed)
        self._beats: dict[str, tuple[float, float]] = {}

    def beat(self, loop: str, allowance: float = 0.0) -> None:
        """``loop`` is alive now; with ``allowance``, it starts something that may take
        that many seconds more than an ordinary iteration before it beats again."""
        at = self._clock()
        with self._lock:
            self._beats[loop] = (at, max(0.0, allowance))

    def done(self, loop: str) -> None:
        """``loop`` ended on purpose (the worker stops): no longer watched."""
        with self._lock:
            self._beats.pop(loop, None)

    def loops(self) -> dict[str, float]:
        """Each watched loop's seconds since its last beat."""
        now = self._clock()
        with self._lock:
            return {loop: now - at for loop, (at, _) in self._beats.items()}

    def stale(self, bound: float) -> list[Stale]:
        """The loops whose last beat is older than ``bound`` plus its allowance, oldest
        first."""
        now = self._clock()
        with self._lock:
            beats = list(self._beats.items())
        found = [Stale(loop, now - at, bound + allowance)
                 for loop, (at, allowance) in beats if now - at > bound + allowance]
        return sorted(found, key=lambda s: (-s.age, s.loop))

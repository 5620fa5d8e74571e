"""Rate limiting: a token bucket per key, in the memory of one process (API tokens, webhook
receivers).

Each key may make ``burst`` requests at once and ``rate`` per second on average. With N
API processes behind a load balancer a token gets up to N times that; the limit is a
guard against a runaway client, not a billing meter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Buckets kept at most; the idlest half is dropped beyond it (full buckets hold no state).
MAX_KEYS = 100_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst ≥ 1")
        self.rate, self.burst, self.clock = float(rate), float(burst), clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> float:
        """Take one request for ``key``: 0.0 if allowed, else the seconds to wait."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= MAX_KEYS:
                    self._evict()
                bucket = self._buckets[key] = _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    def _evict(self) -> None:
        idle = sorted(self._buckets, key=lambda k: self._buckets[k].at)
        for key in idle[: len(idle) // 2]:
            del self._buckets[key]

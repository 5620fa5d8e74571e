"""Which errors are worth retrying, and after how long."""

from __future__ import annotations

import random

from egress.exceptions import EgressError

_TRANSIENT_WORDS = (
    "connection",
    "timeout",
    "timed out",
    "could not connect",
    "server closed",
    "terminating connection",
    "serialization",
    "deadlock",
    "database is locked",
    "temporarily",
    "slowdown",
    "reset by peer",
)


def is_transient(exc: BaseException) -> bool:
    """Transient: a later attempt may succeed (network, restarts, locks, throttling).

    egress's own errors say so themselves; a driver error counts as transient when its
    class or message is about connections, timeouts or locks. Anything else unexpected
    is retried too (up to max_attempts): a bug fails the task after a few attempts, a
    passing fault does not fail a long export.
    """
    if isinstance(exc, EgressError):
        return exc.transient
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    if any(word in text for word in _TRANSIENT_WORDS):
        return True
    return not isinstance(exc, (ValueError, TypeError, KeyError, AttributeError))


def backoff_delay(
    attempt: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Exponential backoff with full jitter: uniform in [base·2^(n-1)/2, base·2^(n-1)]."""
    rng = rng or random.Random()
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return ceiling / 2 + rng.random() * ceiling / 2

"""Which errors are worth retrying, and after how long.

Transient: a later attempt may succeed — a lost or refused connection, a timeout, a
server restarting (``admin_shutdown``), a serialization failure or deadlock, a lock held
by another process, S3 throttling or 5xx. Permanent: everything else — a syntax error, an
unknown table or column, a denied permission, a refused password, a bug. A permanent error
fails the task at once (docs/jobs.md), so it never hides behind ``max_attempts`` retries.

egress's own errors say which they are (``EgressError.transient``); the sources and sinks
translate their drivers' errors at their boundary. What reaches the worker untranslated
is classified here by the driver's own class and SQLSTATE, never by the message alone.
"""

from __future__ import annotations

import errno
import random
import sqlite3

from egress.exceptions import EgressError, SinkError, SourceError, StoreError
from egress.sources.pg_errors import sqlstate_transient

_NETWORK_ERRNOS = frozenset({
    errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
    errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN,
})


def _driver_transient(exc: BaseException) -> bool | None:
    """The verdict of a database or S3 driver's error class; None when not a driver's.
    The drivers are imported here, not with the module: a worker's start-up would pay for
    botocore (~40 ms) and psycopg whatever its exports read and write."""
    import adbc_driver_manager
    import botocore.exceptions as boto
    import psycopg

    if isinstance(exc, psycopg.Error):
        if exc.sqlstate is None:  # no answer from the server: the connection broke
            return isinstance(exc, psycopg.OperationalError)
        return sqlstate_transient(exc.sqlstate)
    if isinstance(exc, adbc_driver_manager.Error):
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate:
            return sqlstate_transient(sqlstate)
        return isinstance(exc, adbc_driver_manager.OperationalError)
    if isinstance(exc, sqlite3.OperationalError):
        # another process holds the database: SQLITE_BUSY / SQLITE_LOCKED
        code = getattr(exc, "sqlite_errorcode", None)
        busy = code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        return busy or "database is locked" in str(exc)
    if isinstance(exc, sqlite3.Error):
        return False
    if isinstance(exc, boto.ClientError | boto.BotoCoreError):
        # the S3 sink's own table: 5xx, 429, throttling, timeouts, dropped connections
        from egress.sinks.s3_client import is_transient as s3_transient

        return s3_transient(exc)
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether a later attempt of the same work may succeed (see the module's text)."""
    if isinstance(exc, EgressError):
        return exc.transient
    verdict = _driver_transient(exc)
    if verdict is not None:
        return verdict
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _NETWORK_ERRNOS
    return False  # a bug or bad data: the same input fails the same way


def backoff_delay(
    attempt: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Exponential backoff with full jitter: uniform in [base·2^(n-1)/2, base·2^(n-1)]."""
    rng = rng or random.Random()
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return ceiling / 2 + rng.random() * ceiling / 2


def retry_reason(exc: BaseException) -> str:
    """What kind of transient error ``exc`` is, in a word of ``egress.metrics.RETRY_REASONS``
    (the label of ``egress_retries_total``: never the message)."""
    if isinstance(exc, EgressError):
        for cls, reason in ((SourceError, "source"), (SinkError, "destination"),
                            (StoreError, "store")):
            if isinstance(exc, cls):
                return reason
        return "other"
    if isinstance(exc, TimeoutError):
        return "timeout"
    verdict = _driver_transient(exc)
    if verdict is not None:
        import botocore.exceptions as boto

        if isinstance(exc, boto.ClientError | boto.BotoCoreError):
            return "s3"
        if isinstance(exc, sqlite3.Error):
            return "locked"
        # psycopg / ADBC: no SQLSTATE means the connection broke; one means the server
        # asked for a retry (serialization failure, deadlock, shutdown)
        return "database" if getattr(exc, "sqlstate", None) else "connection"
    if isinstance(exc, OSError):  # ConnectionError and the network errnos
        return "connection"
    return "other"

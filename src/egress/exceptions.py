"""One exception tree for egress.

    EgressError                      base of everything egress raises on purpose
    ├── ConfigError                  bad settings or arguments (exit code 2)
    │   ├── UnknownNameError         a name not in a registry; lists the known ones
    │   └── ResumeMismatchError      --resume against a different export than the checkpoint
    ├── SourceError                  the source cannot be read
    │   ├── SourceUnavailableError   cannot connect / open (transient for workers)
    │   ├── SourceAccessError        the server refused the login or has no such database
    │   ├── TableNotFoundError       unknown table; lists close names
    │   ├── NoUsableKeyError         a table without a key that keyset pagination can use
    │   ├── PermissionDeniedError    the source's user may not read a table
    │   ├── DataError                a value that cannot be represented as declared
    │   ├── SnapshotLostError        the export's consistent snapshot is gone (permanent)
    │   └── ValueTooLargeError       a value (or a part's rows) above the size limit
    ├── SinkError                    the destination cannot be written
    │   ├── SinkUnavailableError     the destination is unreachable or throttling (transient)
    │   └── DestinationFullError     no space left or over quota on disk (transient)
    ├── LeaseLostError               a checkpoint commit was fenced off: stop writing at once
    ├── StoreError                   the job store cannot be reached (transient)
    ├── NotFoundError                no such export in the caller's project
    ├── ActiveLimitError             the project has its most exports queued or running
    ├── ApiError (api/errors.py)     an HTTP-layer error with its status: Unauthorized,
    │                                Forbidden, Gone, PayloadTooLarge, TooManyRequests,
    │                                NotSupported
    ├── ResolveError (webhooks/guard.py)  a callback's host did not resolve (transient)
    └── PostError (webhooks/client.py)    a webhook POST got no HTTP answer (transient)
    (ConfigError also has IdempotencyConflictError: a key reused with another request,
    and Refused (webhooks/guard.py): the SSRF guard refused a callback URL)

Third-party errors are converted at the boundary with ``raise X(...) from exc``.
Messages say what was wrong and, where it helps, what is allowed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class EgressError(Exception):
    """Base class of every error egress raises on purpose."""

    #: Whether retrying the same work later may succeed (network, locks, restarts).
    transient: bool = False


class ConfigError(EgressError):
    """Bad settings or arguments."""


class UnknownNameError(ConfigError):
    """A name that is not in a registry (format, compression, source kind…)."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known)}")


class ResumeMismatchError(ConfigError):
    """--resume asked for something other than what the checkpoint on disk holds."""


class SourceError(EgressError):
    """The source cannot be read."""


class SourceUnavailableError(SourceError):
    """The source cannot be opened or reached."""

    transient = True


class SourceAccessError(SourceError):
    """The source's server answered but refused: wrong or missing password, a user it does
    not accept, a database it does not have (permanent: fix the source's settings)."""


class TableNotFoundError(SourceError):
    """A table that the source's catalog does not have."""

    def __init__(self, table: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(table, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        listing = ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
        super().__init__(f"table {table!r} not found{hint} (tables: {listing or 'none'})")
        self.table, self.known, self.close = table, known, close


class NoUsableKeyError(SourceError):
    """A table that has no primary key nor unique not-null key to paginate by."""


class PermissionDeniedError(SourceError):
    """The source's user lacks the privilege to read a table (permanent: grant it)."""


class DataError(SourceError):
    """A value that cannot be represented in the type its column declares."""


class SnapshotLostError(SourceError):
    """The exported snapshot a ``snapshot: true`` export reads is gone: its coordinating
    session ended. Permanent: the export never continues on another snapshot."""


class EngineQueryError(SourceError):
    """A remote engine (Trino) failed the query: its ``errorName`` and message (permanent:
    the query is over; a retry of the export submits it again)."""

    def __init__(self, name: str, message: str, error_type: str | None = None) -> None:
        self.name, self.message, self.error_type = name, message, error_type
        super().__init__(f"the engine failed the query: {name}: {message}")


class ResultGoneError(SourceError):
    """The engine no longer holds a query's result at the URI egress kept (expired,
    abandoned, or already read past): that output starts over from nothing."""


class ValueTooLargeError(SourceError):
    """A value, or the rows of one part, larger than the limit set for one export
    (permanent: the same row is as large next time)."""


class SinkError(EgressError):
    """The destination cannot be written."""


class SinkUnavailableError(SinkError):
    """The destination is unreachable, failing (5xx) or throttling, after retries."""

    transient = True


class DestinationFullError(SinkError):
    """The destination's file system is full or over quota (ENOSPC, EDQUOT): committed
    work is kept, and a retry or resume succeeds once space is freed."""

    transient = True


class LeaseLostError(EgressError):
    """The checkpoint commit was rejected: another worker owns the task now."""


class StoreError(EgressError):
    """The job store cannot be reached or refused an operation."""

    transient = True


class IdempotencyConflictError(ConfigError):
    """An idempotency key reused with a different request."""


class NotFoundError(EgressError):
    """An export (or other record) that does not exist in the caller's project."""


class ActiveLimitError(EgressError):
    """A create refused: the project has as many exports queued or running as allowed."""

"""Exported snapshots of PostgreSQL (``snapshot: true``): the session that holds one, and
how a read joins it.

A coordinating session opens ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY``, calls
``pg_export_snapshot()`` and stays open, idle in its transaction, for the life of the
export. Every page read of every task, on any worker, then starts its own REPEATABLE
READ transaction with ``SET TRANSACTION SNAPSHOT '<id>'`` and sees exactly what the
coordinator saw. A snapshot lives only as long as the transaction that exported it:
when the coordinating session ends (its worker stopped or was killed, its connection
was lost), importing it fails with SQLSTATE 22023 "invalid snapshot identifier", and
the export fails (:func:`snapshot_lost`) — egress never falls back to a fresh snapshot,
which would mix two points in time in one export.

While the session is held, PostgreSQL keeps every row version the snapshot may see:
VACUUM cannot remove rows deleted or updated after it was taken (docs/jobs.md).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from egress.exceptions import SnapshotLostError, SourceError
from egress.redact import redact_url, scrub, url_secrets
from egress.sources.pg_errors import connect_error, libpq_url
from egress.sources.pg_keyset import quote_literal

#: What ``pg_export_snapshot()`` returns (``0000000A-0000001B-1``): checked before a
#: snapshot id taken from the store is written into a statement (it is quoted as well).
SNAPSHOT_ID = re.compile(r"[0-9A-F]{8}-[0-9A-F]{8,16}-[0-9]{1,10}")
#: SQLSTATEs of ``SET TRANSACTION SNAPSHOT`` when the snapshot's transaction is over
#: (22023 invalid snapshot identifier; 55000 could not import the requested snapshot).
LOST_SQLSTATES = ("22023", "55000")


def check_snapshot_id(snapshot_id: str) -> str:
    if not isinstance(snapshot_id, str) or not SNAPSHOT_ID.fullmatch(snapshot_id):
        raise SourceError(f"not a PostgreSQL snapshot id: {snapshot_id!r} "
                          "(expected what pg_export_snapshot() returns, like 00000003-0000001B-1)")
    return snapshot_id


def set_snapshot_sql(snapshot_id: str) -> str:
    """The statement that makes a transaction read ``snapshot_id`` (checked, quoted)."""
    return f"SET TRANSACTION SNAPSHOT {quote_literal(check_snapshot_id(snapshot_id))}"


def snapshot_lost(snapshot_id: str, coordinator: str | None, detail: str) -> SnapshotLostError:
    """The error of a read whose export's snapshot is gone (docs/jobs.md, "Consistency")."""
    return SnapshotLostError(
        f"the export's snapshot {snapshot_id} is gone: the PostgreSQL session of its "
        f"coordinator (worker {coordinator or 'unknown'}) ended — that worker stopped or "
        "was killed, or lost its connection to the source. A snapshot export never "
        "continues on another snapshot; retry the export to start it over on a new one "
        f"(PostgreSQL: {detail})"
    )


class SnapshotSession:
    """One psycopg session holding an exported snapshot until :meth:`close` (psycopg is
    imported here, not by every PostgreSQL export: it costs ~14 MB and 0.1 s)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        url = libpq_url(url)
        self._url = url
        self._secrets = url_secrets(url)
        try:
            self._conn: Any = psycopg.connect(
                url, autocommit=True, application_name="egress snapshot")
        except psycopg.Error as exc:
            raise self._error(exc) from None
        try:
            self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = self._conn.execute("SELECT pg_export_snapshot()").fetchone()
        except psycopg.Error as exc:
            self.close()
            raise self._error(exc) from None
        assert row is not None
        self.id: str = check_snapshot_id(row[0])

    def _error(self, exc: Exception) -> SourceError:
        first = scrub(str(exc), self._secrets).strip().splitlines()
        return connect_error(redact_url(self._url), getattr(exc, "sqlstate", None),
                             first[0] if first else type(exc).__name__)

    def alive(self) -> bool:
        """Whether the session (and so the snapshot) still holds: one round trip."""
        try:
            self._conn.execute("SELECT 1").fetchone()
        except self._psycopg.Error:
            return False
        return True

    def close(self) -> None:
        """End the transaction and the session: the snapshot can no longer be imported.

        The ROLLBACK ends the exporting transaction before this returns; closing the
        socket alone leaves the server's backend to end it a moment later, during which
        an import of the snapshot still succeeds."""
        with contextlib.suppress(self._psycopg.Error):
            if not self._conn.closed:
                self._conn.execute("ROLLBACK")
        with contextlib.suppress(self._psycopg.Error):
            self._conn.close()

    def __enter__(self) -> SnapshotSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""One snapshot for a whole one-shot run (``egress export --snapshot``, the library's
``export(snapshot=True)``): every table is read as the database was at one moment.

- PostgreSQL: this process opens a session that exports a snapshot
  (sources/pg_snapshot.py) and holds it for the run; every page is read in it.
- SQLite: the source's one read connection holds one read transaction for the run
  (:meth:`~egress.sources.sqlite.SqliteSource.hold_read_transaction`). In WAL mode
  writers go on and the export does not see them; in a rollback-journal database the
  held read lock makes writers wait (SQLITE_BUSY) until the run ends.

A snapshot lives only as long as the run, so an interrupted snapshot run cannot be
resumed (that would read the rest in another snapshot): it is run again.
Jobs (``snapshot: true``) coordinate a snapshot across workers instead: worker/snapshot.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from egress.exceptions import ConfigError
from egress.sources import source_kind
from egress.sources.base import Source

#: The server's CSV is read by one COPY per slice, which does not import the snapshot yet.
SNAPSHOT_AND_SERVER_CSV = ("snapshot cannot be combined with csv_dialect postgres yet (its "
                           "COPY stream does not read in the export's snapshot); use the "
                           "egress CSV dialect for a snapshot export")


@dataclass(frozen=True)
class HeldSnapshot:
    #: PostgreSQL's snapshot id; None for SQLite (a read transaction has no name)
    id: str | None
    taken_at: dt.datetime
    release: Callable[[], None]


def hold_snapshot(url: str, source: Source, *, query: bool = False) -> HeldSnapshot:
    """Make ``source`` (opened on ``url``) read every page in one snapshot taken now,
    until ``release()``."""
    kind = source_kind(url)
    use = getattr(source, "use_snapshot", None)
    if kind in ("postgresql", "postgres") and use is not None:
        from egress.sources.pg_snapshot import SnapshotSession

        session = SnapshotSession(url)
        try:
            use(session.id, "this process")
        except BaseException:
            session.close()
            raise
        return HeldSnapshot(session.id, dt.datetime.now(dt.UTC), session.close)
    hold = getattr(source, "hold_read_transaction", None)
    if kind == "sqlite" and hold is not None and not query:
        hold()
        return HeldSnapshot(None, dt.datetime.now(dt.UTC), lambda: None)
    what = "a query on SQLite" if kind == "sqlite" else f"a {kind} source"
    raise ConfigError(f"--snapshot reads PostgreSQL sources and SQLite tables in one snapshot; "
                      f"{what} cannot be (export without --snapshot)")

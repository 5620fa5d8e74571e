"""Coordinating the snapshot of a ``snapshot: true`` export (PostgreSQL sources).

The first worker that claims a task of such an export, while no snapshot is recorded,
becomes its coordinator: a thread of that worker opens its own session to the source,
exports a snapshot (sources/pg_snapshot.py) and records its id, the worker's name and
the store's time with one conditional statement (``export_snapshot_set``: only if none
is recorded). Of two workers racing, one wins; the loser closes its session. The
winner holds the session, idle in its transaction, until the export is terminal (or a
retry replaced the snapshot), checking the store and the session every
``heartbeat_seconds``; then it ends the session.

Tasks of the export wait (requeued with a short delay) until the snapshot is recorded,
then read every page in it. The snapshot dies with the session, so:

- the coordinator's session is lost (the server restarted, the connection broke): the
  coordinator fails the export at once;
- the coordinator's worker stops (SIGTERM): it ends the session, so it fails the export
  unless every task is done already — an exported snapshot cannot be handed over;
- the coordinator's worker is killed (SIGKILL, a lost machine): PostgreSQL ends the
  session when the connection drops; the next page read of any task finds the snapshot
  gone (SnapshotLostError) and the export fails, naming the coordinator.

Never a fallback to a fresh snapshot: that would mix two points in time in one export.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from egress.config import Settings
from egress.domain.jobs import ExportRecord, TaskState
from egress.exceptions import SnapshotLostError
from egress.failures import describe_failure
from egress.store.base import WorkerStore

if TYPE_CHECKING:  # psycopg loads only in a worker that coordinates a snapshot
    from egress.sources.pg_snapshot import SnapshotSession

log = logging.getLogger(__name__)

#: How long a claimed task waits for this worker's coordinator to record a snapshot
#: before it is requeued (exporting one takes a few milliseconds).
TAKE_SECONDS = 10.0
#: A task of an export whose snapshot another worker is taking is requeued this long.
WAIT_SECONDS = 0.5


class _Coordinator(threading.Thread):
    def __init__(self, owner: SnapshotCoordinators, export: ExportRecord) -> None:
        super().__init__(name=f"snapshot-{export.id}", daemon=True)
        self.owner, self.export_id, self.source = owner, export.id, export.source
        #: set once the snapshot is recorded, or this worker lost the race or failed
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        o = self.owner
        try:
            from egress.sources.pg_snapshot import SnapshotSession

            session = SnapshotSession(o.settings.source_url(self.source))
        except BaseException as exc:  # the claiming slot raises it (retried if transient)
            self.error = exc
            self.ready.set()
            return
        try:
            won = o.store.export_snapshot_set(self.export_id, session.id, o.name)
        except BaseException as exc:
            session.close()
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        if not won:  # another coordinator recorded its snapshot first, or the export ended
            session.close()
            return
        log.info("snapshot taken; holding it for the export",
                 extra={"export": self.export_id, "snapshot": session.id})
        try:
            self._hold(session)
        finally:
            session.close()
            log.info("snapshot released", extra={"export": self.export_id,
                                                 "snapshot": session.id})

    def _hold(self, session: SnapshotSession) -> None:
        o = self.owner
        while not o.stopping.wait(o.settings.worker.heartbeat_seconds):
            try:
                export = o.store.export_get(None, self.export_id)
            except Exception as exc:  # the store is away: keep holding, ask again
                log.warning("snapshot coordinator: store unreachable",
                            extra={"export": self.export_id, "error": str(exc)})
                continue
            if export is None or export.state.terminal or export.snapshot_id != session.id:
                return
            if not session.alive():
                self._fail(session.id, "lost its connection to the source")
                return
        self._fail(session.id, "was stopped (a graceful shutdown ends the session that "
                               "holds the snapshot, which cannot be handed over)")

    def _fail(self, snapshot_id: str, what: str) -> None:
        o = self.owner
        try:
            if all(t.state is TaskState.DONE for t in o.store.task_list(self.export_id)):
                return  # every row is read: the snapshot is no longer needed
            error = SnapshotLostError(
                f"the export's snapshot {snapshot_id} is gone: its coordinator, worker "
                f"{o.name}, {what}. A snapshot export never continues on another snapshot; "
                "retry the export to start it over on a new one")
            if o.store.export_fail(self.export_id, describe_failure(error)):
                log.error("snapshot lost; the export fails",
                          extra={"export": self.export_id, "error": str(error)})
        except Exception as exc:  # the tasks' reads fail it anyway (the snapshot is gone)
            log.warning("snapshot coordinator: could not fail the export",
                        extra={"export": self.export_id, "error": str(exc)})


class SnapshotCoordinators:
    """The snapshot sessions this worker holds: one thread per export it coordinates."""

    def __init__(self, store: WorkerStore, settings: Settings, name: str,
                 stopping: threading.Event) -> None:
        self.store, self.settings, self.name, self.stopping = store, settings, name, stopping
        self._threads: dict[str, _Coordinator] = {}
        self._lock = threading.Lock()

    def snapshot_of(self, export: ExportRecord) -> ExportRecord | None:
        """``export`` with its snapshot recorded, taken by this worker if none is yet;
        None while it is not (the caller requeues its task for ``WAIT_SECONDS``). Raises
        the error that kept this worker from taking one (source unreachable, …)."""
        if export.snapshot_id is not None:
            return export
        with self._lock:
            coordinator = self._threads.get(export.id)
            if coordinator is None or not coordinator.is_alive():
                coordinator = _Coordinator(self, export)
                self._threads[export.id] = coordinator
                coordinator.start()
        coordinator.ready.wait(TAKE_SECONDS)
        if coordinator.error is not None:
            raise coordinator.error
        fresh = self.store.export_get(None, export.id)
        return fresh if fresh is not None and fresh.snapshot_id is not None else None

    def held(self) -> list[str]:
        """Ids of the exports whose snapshot this worker holds right now."""
        with self._lock:
            return [k for k, t in self._threads.items() if t.is_alive()]

    def close(self, timeout: float) -> None:
        """Wait for the coordinators to end their sessions (after ``stopping`` is set)."""
        with self._lock:
            threads: list[Any] = list(self._threads.values())
        for t in threads:
            t.join(timeout)

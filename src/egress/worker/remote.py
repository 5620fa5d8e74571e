"""Remote engines (Trino) in the worker: submit once, poll from the job store, stream.

A remote task is claimed like any other. Its first claim submits the query (``submit``)
and ends the lease: the task is ``submitted``, its query id and next URI in the store.
A poll pass in every worker (``poll_pass``) takes the tasks that are due, asks the engine
once each (a few threads, not one per query) and stores what it said:

    still queued / planning   poll_count + 1, next poll after the next delay
                              (2, 3, 5, 8, 13, 21, 34, 55, 89, then 90 s)
    the result is ready       queued again: a slot claims it and streams it (direct)
    finished (unload)         the files the engine wrote are listed, their row counts
                              read from the Parquet footers: the task is done
    failed                    the task fails with the engine's error, its export too
    export ended              DELETE on the engine; the task is cancelled
    410 Gone                  looked up by id; submitted again (or failed)

Streaming (direct mode) is the engine's ordinary slice with a TrinoSource positioned at
the stored URI; a result the engine no longer holds starts that table over from nothing
(``restart``), which the task's ``remote_note`` records. See docs/trino.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from egress.config import Settings
from egress.domain.checkpoint import Checkpoint, FileRecord, TaskSpec
from egress.domain.filenames import safe_base_name
from egress.domain.jobs import ExportRecord, TaskRecord
from egress.exceptions import (
    ConfigError,
    EgressError,
    EngineQueryError,
    ResultGoneError,
    SourceError,
)
from egress.failures import describe_failure
from egress.manager import open_sink
from egress.sinks.base import Sink
from egress.sources.query import Query
from egress.store.base import WorkerStore
from egress.worker.finalize import finalize_export

if TYPE_CHECKING:
    from egress.sources.trino import TrinoSource
    from egress.sources.trino_client import QueryResults

# The Trino source and its HTTP client (httpx) are imported where a remote task needs
# them: every worker runs this module's poller, and most never meet a remote engine
# (httpx and what it imports were ~100 ms of a worker's start-up).

log = logging.getLogger(__name__)

MODES = ("direct", "unload")


class MissingRoleError(ConfigError):
    """An export on a remote engine runs with the role its request names; it named none."""


class FirstCallTimeoutError(SourceError):
    """The engine did not answer the first call of a task, even after the retries
    (permanent: the task was given its retries)."""


def poll_delay(settings: Settings, poll_count: int) -> float:
    """Seconds until the poll after ``poll_count`` polls: 2, 3, 5, … 89, then 90."""
    delays = settings.remote.poll_delays
    return delays[min(poll_count, len(delays) - 1)]


def open_remote(settings: Settings, export: ExportRecord) -> TrinoSource:
    """The export's engine, as the export's role and client tags."""
    opts = export.options
    role = opts.get("role")
    if not role:
        raise MissingRoleError(
            "missing role: an export from a remote engine runs with the role its request "
            "names (--role, or \"role\" in the API); there is no worker-wide default")
    query = opts.get("query")
    from egress.sources.trino import TrinoSource

    return TrinoSource(settings.source_url(export.source),
                       Query.from_json(query) if query else None,
                       settings.export.query_timeout_seconds, role=role,
                       tags=tuple(opts.get("client_tags") or ()))


def unload_folder(task: TaskRecord) -> str:
    return safe_base_name(task.table)


def unload_sql(source: TrinoSource, table: str, location: str) -> str:
    """Starburst's ``system.unload`` writing ``table``'s result as Parquet to ``location``."""
    from egress.sources.trino import quote_literal

    return ("SELECT * FROM TABLE(system.unload(\n"
            f"  input => TABLE({source.result_sql(table)}),\n"
            f"  location => {quote_literal(location)},\n"
            "  format => 'PARQUET',\n  compression => 'SNAPPY'))")


class RemoteWork:
    def __init__(self, store: WorkerStore, settings: Settings,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store, self.settings, self._sleep = store, settings, sleep

    # --- a claimed task: submit ---------------------------------------------------------

    def submit(self, task: TaskRecord, export: ExportRecord) -> str:
        """Send the task's query (the lease is held); ``submitted`` once the engine has it."""
        assert task.lease_token is not None
        source = open_remote(self.settings, export)
        try:
            sink = open_sink(self.settings, export)
            if task.remote_mode == "unload":
                sql = unload_sql(source, task.table, sink.url_of(unload_folder(task)))
            else:
                sql = source.result_sql(task.table)
            results = self._first_call(source, sql)
        finally:
            source.close()
        if results.error is not None:
            if task.remote_mode == "unload" and results.error.name == "FUNCTION_NOT_FOUND":
                return self.fallback(task, results.error)
            raise results.error  # the runner fails the task (or retries a transient one)
        self.store.remote_submitted(
            task.id, task.lease_token, query_id=results.id, next_uri=results.next_uri,
            delay=poll_delay(self.settings, 0))
        log.info("query submitted", extra={"export": export.id, "task": task.id,
                                           "query_id": results.id, "mode": task.remote_mode})
        return "submitted"

    def _first_call(self, source: TrinoSource, sql: str) -> QueryResults:
        import httpx

        r = self.settings.remote
        for attempt in range(r.first_call_retries + 1):
            try:
                return source.client.submit(sql, role=source.role, tags=source.tags,
                                            timeout=r.first_call_timeout)
            except httpx.TimeoutException:
                if attempt == r.first_call_retries:
                    break
                log.warning("the engine did not answer the first call; retrying",
                            extra={"attempt": attempt + 1, "wait": r.first_call_wait})
                self._sleep(r.first_call_wait)
        raise FirstCallTimeoutError(
            f"the engine did not answer the first call within {r.first_call_timeout:.0f} s, "
            f"{r.first_call_retries + 1} times (a resource group starting cold?)")

    # --- a claimed task: stream ---------------------------------------------------------

    def open_stream(self, task: TaskRecord, export: ExportRecord) -> tuple[TrinoSource, Any]:
        source = open_remote(self.settings, export)
        source.start_uri = task.next_uri
        source.result_columns = task.result_columns
        from egress.sources.trino import info_from_columns

        return source, info_from_columns(task.table, task.result_columns or [])

    def cancel_stream(self, source: Any) -> None:
        """The export was cancelled while its result streamed: stop it on the engine."""
        if source.current_uri:
            try:
                source.client.cancel(source.current_uri)
            except EgressError as exc:
                log.warning("could not cancel on the engine", extra={"error": str(exc)})

    def restart(self, task: TaskRecord, export: ExportRecord, sink: Sink,
                cp: Checkpoint | None, why: ResultGoneError) -> str:
        """The engine no longer holds the result: remove what this task wrote and start
        it over from nothing (a new query)."""
        assert task.lease_token is not None
        if cp is not None:
            if cp.open_file is not None:
                sink.abort_file(cp.open_file.name, cp.open_file.sink_state)
            for f in cp.files:
                sink.delete(f.name)
        note = (f"restarted from nothing after {cp.rows if cp else 0} rows: {why}; "
                "the rows written before were removed")
        log.warning("result lost on the engine; the table starts over",
                    extra={"export": export.id, "task": task.id, "error": str(why)})
        self.store.remote_restart(task.id, task.lease_token, note=note)
        return "restarted"

    def fallback(self, task: TaskRecord, error: EngineQueryError) -> str:
        assert task.lease_token is not None
        note = f"system.unload is not available on this engine ({error.name}): exported directly"
        log.warning(note, extra={"task": task.id})
        self.store.remote_requeue_direct(task.id, task.lease_token, note=note)
        return "requeued"

    # --- the poll pass ------------------------------------------------------------------

    def poll_pass(self) -> int:
        """Poll every due submitted task once (bounded per pass). Returns how many."""
        r = self.settings.remote
        due = self.store.remote_take_due(hold_seconds=r.poll_hold_seconds, limit=r.poll_batch)
        if not due:
            return 0
        with ThreadPoolExecutor(min(r.poll_threads, len(due)),
                                thread_name_prefix="egress-poll") as pool:
            for outcome in pool.map(self._poll_safely, due):
                log.debug("polled", extra={"outcome": outcome})
        return len(due)

    def _poll_safely(self, task: TaskRecord) -> str:
        try:
            return self.poll(task)
        except Exception as exc:  # this poll only: the task is due again later
            log.warning("poll failed", extra={"task": task.id, "error": describe_failure(exc)})
            self.store.remote_polled(task, next_uri=None,
                                     delay=poll_delay(self.settings, task.poll_count + 1))
            return "error"

    def poll(self, task: TaskRecord) -> str:
        export = self.store.export_get(None, task.export_id)
        if export is None or export.state.terminal:
            return self._stop(task, export)
        source = open_remote(self.settings, export)
        try:
            try:
                results = source.client.fetch(task.next_uri or "", role=source.role)
            except ResultGoneError as exc:
                return self._lost(task, export, source, exc)
            if results.error is not None:
                if task.remote_mode == "unload" and results.error.name == "FUNCTION_NOT_FOUND":
                    note = ("system.unload is not available on this engine "
                            f"({results.error.name}): exported directly")
                    self.store.remote_resubmit(task, note=note, mode="direct")
                    return "fallback"
                self.store.remote_fail(task, str(results.error))
                return "failed"
            if task.remote_mode == "unload":
                if results.next_uri is None:  # finished: the files are written
                    return self._unloaded(task, export)
            elif not results.waiting:
                # the result is ready: stream it from this very URI (asked again)
                self.store.remote_stream(task, next_uri=task.next_uri or "",
                                         columns=results.columns or [])
                return "stream"
            self.store.remote_polled(task, next_uri=results.next_uri,
                                     delay=poll_delay(self.settings, task.poll_count + 1))
            return "waiting"
        finally:
            source.close()

    def _stop(self, task: TaskRecord, export: ExportRecord | None) -> str:
        """The export ended (cancelled, failed, deleted): stop the query on the engine."""
        if export is not None and task.next_uri:
            source = open_remote(self.settings, export)
            try:
                source.client.cancel(task.next_uri)
            except EgressError as exc:
                log.warning("could not cancel on the engine",
                            extra={"task": task.id, "error": str(exc)})
            finally:
                source.close()
        self.store.remote_cancelled(task)
        return "cancelled"

    def _lost(self, task: TaskRecord, export: ExportRecord, source: TrinoSource,
              why: ResultGoneError) -> str:
        """The next URI is gone: what does the engine know of the query?"""
        info = source.client.lookup(task.query_id) if task.query_id else None
        state = (info or {}).get("state")
        if state == "FAILED":
            error = (info or {}).get("failureInfo") or {}
            name = ((info or {}).get("errorCode") or {}).get("name", "FAILED")
            self.store.remote_fail(task, str(EngineQueryError(name, error.get("message", ""))))
            return "failed"
        if state == "FINISHED" and task.remote_mode == "unload":
            return self._unloaded(task, export)
        if state not in (None, "FINISHED", "FAILED") and task.query_id:
            source.client.kill(task.query_id)  # its result cannot be read: stop it
        self.store.remote_resubmit(
            task, note=f"submitted again: the engine no longer held the query's next URI "
                       f"({why}; the query was {state or 'unknown to the engine'})")
        return "resubmitted"

    def _unloaded(self, task: TaskRecord, export: ExportRecord) -> str:
        """The engine wrote the files: count their rows from the Parquet footers."""
        import pyarrow.parquet as pq

        sink = open_sink(self.settings, export)
        files: list[FileRecord] = []
        for name, size in sink.list_files(unload_folder(task)):
            with sink.open_reader(name, size) as reader:
                rows = pq.ParquetFile(reader).metadata.num_rows
            files.append(FileRecord(name=name, rows=rows, size=size, crc32c=None,
                                    sha256=None, parts=1, first_key=None, last_key=None))
        rows = sum(f.rows for f in files)
        size = sum(f.size for f in files)
        cp = Checkpoint(rows=rows, bytes=size, files=tuple(files), done=True)
        spec = TaskSpec(table=task.table, format="parquet", compression="snappy",
                        part_rows=1, base_name=unload_folder(task))
        # the manifest's schema: the table as the engine describes it
        source = open_remote(self.settings, export)
        try:
            info = source.describe(task.table)
        finally:
            source.close()
        columns = [[c.name, c.source_type] for c in info.columns]
        if self.store.remote_done(task, checkpoint=cp.to_json(), rows=rows, bytes=size,
                                  spec=spec.to_json(), columns=columns):
            finalize_export(self.store, self.settings, export.id)
        return "done"

    # --- the reconciler's part ------------------------------------------------------------

    def reconcile(self) -> int:
        """Reset claims never submitted; look up queries nobody polled. Returns resets."""
        r = self.settings.remote
        claimed, unpolled = self.store.remote_list_stale(
            claimed_seconds=r.claimed_reset_seconds,
            unpolled_seconds=r.unpolled_lookup_seconds)
        resets = sum(1 for t in claimed if self.store.remote_reset_claim(t))
        for task in unpolled:
            self._poll_safely(task)  # a 410 there leads to the lookup by id
        return resets


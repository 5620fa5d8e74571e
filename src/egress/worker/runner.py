"""Running one slice of a claimed task: plan if needed, run, commit fenced, requeue or finish."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from egress.config import Settings
from egress.domain.checkpoint import Checkpoint, TaskSpec
from egress.domain.jobs import ExportRecord, TaskRecord
from egress.domain.predicate import Predicate
from egress.domain.ranges import KeyRange
from egress.engine.plan import fit_part_budget, plan_task
from egress.engine.sizes import SizeLimits
from egress.engine.slice import Task, run_slice
from egress.engine.split import PlannedRange, plan_split, split_asked
from egress.exceptions import LeaseLostError, ResultGoneError
from egress.failures import describe_failure
from egress.manager import export_source, format_options_of, open_sink
from egress.metrics import (
    BYTES_EXPORTED,
    LEASE_LOSSES,
    RETRIES,
    ROWS_EXPORTED,
    SLICE_SECONDS,
    SLICES,
)
from egress.sinks.base import Sink
from egress.sources import source_kind
from egress.sources.base import Source, TableInfo
from egress.store.base import WorkerStore
from egress.worker.finalize import finalize_export
from egress.worker.lease import LeaseKeeper
from egress.worker.remote import RemoteWork
from egress.worker.retry import backoff_delay, is_transient, retry_reason
from egress.worker.snapshot import WAIT_SECONDS, SnapshotCoordinators

log = logging.getLogger(__name__)


def _message(exc: BaseException) -> str:
    return describe_failure(exc)  # the detail; the store shows API callers its .public


def _abort_unused_uploads(sink: object, recorded: Checkpoint | None, task_id: str) -> None:
    """At the end of a slice, however it ended: abort the uploads the slice created that
    its task's checkpoint does not record (docs/s3.md). Never raises: the reconciler's
    sweep is the backstop."""
    abort = getattr(sink, "abort_unused_uploads", None)
    if abort is None:
        return
    of = recorded.open_file if recorded is not None else None
    keep = {of.sink_state["upload_id"]} if of and of.sink_state.get("upload_id") else set()
    try:
        abort(keep)
    except Exception as exc:
        log.warning("could not abort unused uploads; the orphan sweep will",
                    extra={"task": task_id, "error": _message(exc)})


@dataclass
class _Attempt:
    """What one slice did that the handling of its failure needs to know."""

    #: a commit added bytes: the store reset the task's ``attempts`` (a streak of failures
    #: ends with progress), so the count on the claimed record is out of date
    progressed: bool = False


class TaskRunner:
    def __init__(
        self,
        store: WorkerStore,
        settings: Settings,
        stopping: threading.Event,
        on_event: Callable[[str, TaskRecord], None] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        self.store, self.settings, self.stopping = store, settings, stopping
        self.on_event = on_event
        self.remote = RemoteWork(store, settings)
        #: ``snapshot: true`` exports: the snapshot sessions this worker holds
        self.snapshots = SnapshotCoordinators(
            store, settings, name or f"{socket.gethostname()}:{os.getpid()}", stopping)

    def run(self, task: TaskRecord) -> str:
        """Run one slice of ``task`` (claimed, with its lease token). Returns the outcome:
        requeued | done | retry | failed | lost | cancelled | waiting (for the export's
        snapshot, worker/snapshot.py)."""
        started = time.perf_counter()
        outcome = self._run(task)
        SLICE_SECONDS.observe(time.perf_counter() - started)
        SLICES.labels(outcome).inc()
        if self.on_event:
            self.on_event(outcome, task)
        return outcome

    def _run(self, task: TaskRecord) -> str:
        assert task.lease_token is not None
        w = self.settings.worker
        attempt = _Attempt()
        with LeaseKeeper(self.store, task.id, task.lease_token, w.lease_seconds,
                         w.heartbeat_seconds) as lease:
            try:
                export = self.store.export_get(None, task.export_id)
                if export is None or export.state.terminal:
                    self.store.task_requeue(task.id, task.lease_token)
                    return "cancelled"
                if export.options.get("snapshot"):
                    ready = self.snapshots.snapshot_of(export)
                    if ready is None:  # another worker is taking it: back in a moment
                        self.store.task_requeue(task.id, task.lease_token, delay=WAIT_SECONDS)
                        return "waiting"
                    export = ready
                return self._slice(task, export, lease, attempt)
            except LeaseLostError:
                log.warning("lease lost; stopped writing", extra={"task": task.id})
                return "lost"
            except Exception as exc:
                if self._lost(task, lease):
                    # another worker owns the task (or finished it): what went wrong here
                    # (a staged copy it completed, an upload it finished) is no failure
                    log.warning("lease lost; stopped writing", extra={
                        "task": task.id, "error": _message(exc)})
                    return "lost"
                return self._failed(task, exc, attempt)

    def _slice(self, task: TaskRecord, export: ExportRecord, lease: LeaseKeeper,
               attempt: _Attempt) -> str:
        token = task.lease_token
        assert token is not None
        info: TableInfo | None = None
        source: Source
        if task.remote_mode:  # a remote engine (worker/remote.py)
            if task.query_id is None:
                return self.remote.submit(task, export)
            source, info = self.remote.open_stream(task, export)
        else:
            # the source first: a source that cannot be opened leaves no folder at the sink
            source = export_source(self.settings, export)
        try:
            sink = open_sink(self.settings, export)
        except BaseException:
            source.close()
            raise
        committed: Checkpoint | None = None
        recorded: Checkpoint | None = None  # the task's checkpoint as the store has it
        try:
            if info is None:
                info = source.describe(task.table)
            task, spec, planned = self._plan(task, export, source, sink, info)
            pending_spec: dict | None = spec.to_json() if planned else None
            cp = Checkpoint.from_json(task.checkpoint) if task.checkpoint else Checkpoint()
            labels = (export.format, self._destination_type(export))
            last = recorded = cp  # the metrics count what each commit adds

            def commit(new: Checkpoint) -> None:
                nonlocal pending_spec, committed, last, recorded
                if lease.lost:
                    raise LeaseLostError(f"task {task.id}: lease lost")
                ok = self.store.task_commit(
                    task.id, token, checkpoint=new.to_json(), rows=new.rows, bytes=new.bytes,
                    spec=pending_spec,
                )
                if not ok:
                    LEASE_LOSSES.labels("fenced").inc()
                    raise LeaseLostError(f"task {task.id}: lease lost")
                if new.bytes != last.bytes:  # the store's own test (store/sql_tasks.py)
                    attempt.progressed = True
                pending_spec, committed, recorded = None, new, new
                ROWS_EXPORTED.labels(*labels).inc(max(0, new.rows - last.rows))
                BYTES_EXPORTED.labels(*labels).inc(max(0, new.bytes - last.bytes))
                last = new

            # A new plan is stored with the slice's first commit (``pending_spec``), not
            # alone: nothing before that commit outlives a crash (the writer's staged
            # copy, an upload no checkpoint records), so a task resumed without it is
            # planned again from nothing, and one transaction per task is saved.

            def should_stop() -> bool:
                return self.stopping.is_set() or lease.lost or lease.cancelled

            def fence() -> None:
                if lease.lost:
                    raise LeaseLostError(f"task {task.id}: lease lost; nothing written")
                if not self.store.task_lease_held(task.id, token):
                    LEASE_LOSSES.labels("fenced").inc()
                    raise LeaseLostError(f"task {task.id}: lease lost; nothing written")

            runnable = Task(spec=spec, table=info, source=source, sink=sink, commit=commit,
                            should_stop=should_stop, limits=self._limits(), fence=fence)
            before, started = cp, time.monotonic()
            try:
                cp = run_slice(runnable, cp, started + self.settings.worker.slice_seconds)
            except ResultGoneError as exc:
                if not task.remote_mode:
                    raise
                return self.remote.restart(task, export, sink, committed or before, exc)
            if task.remote_mode and lease.cancelled and not cp.done:
                self.remote.cancel_stream(source)
            seconds = time.monotonic() - started
            log.info("slice ended", extra={
                "export": export.id, "task": task.id, "table": task.table,
                "rows": cp.rows - before.rows, "bytes": cp.bytes - before.bytes,
                "rows_per_s": round((cp.rows - before.rows) / seconds) if seconds > 0 else None,
                "total_rows": cp.rows, "done": cp.done})
        finally:
            source.close()
            _abort_unused_uploads(sink, recorded, task.id)
        if lease.lost:
            return "lost"
        if cp.done:
            if not self.store.task_finish(task.id, token):
                return self._fenced()
            try:
                # the table this slice described: the source is not opened again for it
                finalize_export(self.store, self.settings, export.id,
                                described=None if info is None else {task.table: info})
            except Exception as exc:  # the task is done; the reconciler finalizes later
                log.warning("finalizing failed; the reconciler will retry",
                            extra={"export": export.id, "error": _message(exc)})
            return "done"
        if not self.store.task_requeue(task.id, token):
            return self._fenced()
        return "cancelled" if lease.cancelled else "requeued"

    def _plan(self, task: TaskRecord, export: ExportRecord, source: Source, sink: Sink,
              info: TableInfo) -> tuple[TaskRecord, TaskSpec, bool]:
        """The task's spec, and whether it was planned now (to be stored with the first
        commit). A table's task never planned is first split into key ranges if the
        export splits it (engine/split.py): the task becomes the first range."""
        if task.spec:
            return task, TaskSpec.from_json(task.spec), False
        opts = export.options
        part_size = opts.get("part_size") or self.settings.export.part_size
        max_parts = getattr(sink, "max_parts", None)
        # columns and filters were checked against the catalog at create time
        select = (opts.get("select") or {}).get(task.table) or {}
        columns = select.get("columns")

        def plan(key_range: KeyRange | None) -> TaskSpec:
            return plan_task(
                source, info, format=export.format, compression=export.compression,
                part_size=part_size, part_rows=opts.get("part_rows"),
                max_file_size=opts.get("max_file_size") or self.settings.export.max_file_size,
                min_part_bytes=sink.min_part_bytes, options=format_options_of(opts),
                columns=tuple(columns) if columns else None,
                predicate=Predicate.from_json(select.get("filters")),
                limits=self._limits(), key_range=key_range,
            )

        asked = None
        if task.key_range is None and not task.remote_mode:
            asked = split_asked(opts, source_kind(self.settings.source_url(export.source)),
                                auto_split=self.settings.export.auto_split)
        if asked is not None:
            whole = plan(None)
            ranges = plan_split(source, info, whole, asked,
                                split_rows=self.settings.export.split_rows,
                                part_size=part_size, max_parts=max_parts)
            if ranges:
                task = self._split(task, ranges)
                if task.spec:  # stitched: each range planned with the whole table
                    return task, TaskSpec.from_json(task.spec), False
            else:
                return task, fit_part_budget(whole, info, part_size, max_parts), True
        spec = plan(KeyRange.from_json(task.key_range))
        return task, fit_part_budget(spec, info, part_size, max_parts), True

    def _split(self, task: TaskRecord, ranges: list[PlannedRange]) -> TaskRecord:
        """Store ``task``'s table as ``ranges`` (fenced): ``task`` is now the first.
        Each range's estimate is its exact row count where planning counted it (a
        stitched split), or an even share of the table's estimate: progress and ETA
        count all ranges."""
        assert task.lease_token is not None
        share = None if task.rows_estimate is None else -(-task.rows_estimate // len(ranges))
        planned = [{"key_range": r.to_json(), "spec": s.to_json() if s is not None else None,
                    "rows_estimate": share if rows is None else rows}
                   for r, s, rows in ranges]
        if not self.store.task_split(task.id, task.lease_token, planned):
            LEASE_LOSSES.labels("fenced").inc()
            raise LeaseLostError(f"task {task.id}: lease lost; the split was not stored")
        log.info("table split", extra={"export": task.export_id, "task": task.id,
                                       "table": task.table, "ranges": len(ranges)})
        first, spec, rows = ranges[0]
        return replace(task, key_range=first.to_json(),
                       spec=spec.to_json() if spec is not None else None,
                       rows_estimate=share if rows is None else rows)

    def _lost(self, task: TaskRecord, lease: LeaseKeeper) -> bool:
        """Whether the task's lease is no longer this worker's (a failure then is not
        the task's: it is neither retried nor failed by this worker)."""
        assert task.lease_token is not None
        if lease.lost:
            return True
        try:
            held = self.store.task_lease_held(task.id, task.lease_token)
        except Exception:  # the store is away: the failure is handled as it comes
            return False
        if not held:
            LEASE_LOSSES.labels("fenced").inc()
        return not held

    @staticmethod
    def _fenced() -> str:
        """A fenced write changed no row: another worker holds the task now."""
        LEASE_LOSSES.labels("fenced").inc()
        return "lost"

    def _destination_type(self, export: ExportRecord) -> str:
        return str(self.settings.destinations.get(export.destination, {}).get("type", "local"))

    def _limits(self) -> SizeLimits:
        defaults = self.settings.export
        return SizeLimits(defaults.max_value_bytes, defaults.max_page_bytes)

    def _failed(self, task: TaskRecord, exc: BaseException, attempt: _Attempt) -> str:
        token = task.lease_token
        assert token is not None
        message = _message(exc)
        w = self.settings.worker
        # failures since the last progress: none before this one if this slice committed
        # a part (a claimed record's count then overstates them, and a source that restarts
        # every few parts failed an export that kept moving)
        failures = 0 if attempt.progressed else task.attempts
        try:
            if is_transient(exc) and failures + 1 < task.max_attempts:
                delay = backoff_delay(failures + 1, w.backoff_seconds, w.backoff_max_seconds)
                log.warning("slice failed; will retry",
                            extra={"task": task.id, "error": message, "delay": delay})
                self.store.task_requeue(task.id, token, delay=delay, error=message,
                                        count_attempt=True)
                RETRIES.labels(retry_reason(exc)).inc()
                return "retry"
            log.error("task failed; its export fails", extra={
                "export": task.export_id, "task": task.id, "table": task.table,
                "error": message})
            self.store.task_fail(task.id, token, message)
        except Exception as store_exc:  # the store is away too: the lease will expire
            log.warning("could not record a failure",
                        extra={"task": task.id, "error": _message(store_exc)})
            return "lost"
        return "failed"

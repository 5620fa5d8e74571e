"""Exports and tasks as the job store keeps them: states, records, and the events of leases.

Pure values: nothing here imports SQLAlchemy. Times are seconds since the epoch taken
from the store's clock (never a worker's), so leases do not depend on clocks agreeing.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class ExportState(enum.StrEnum):
    #: Accepted; no task has been claimed yet.
    QUEUED = "queued"
    #: At least one task was claimed.
    RUNNING = "running"
    #: Every task done, files final, manifest written.
    COMPLETED = "completed"
    #: A task failed for good, or the export ran past its maximum duration.
    FAILED = "failed"
    #: Cancelled by a user; partial outputs are removed.
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (ExportState.COMPLETED, ExportState.FAILED, ExportState.CANCELLED)


class TaskState(enum.StrEnum):
    #: Waiting for a worker (new, or put back after a slice, a retry or a lost lease).
    QUEUED = "queued"
    #: Leased by a worker until ``lease_expires_at``.
    RUNNING = "running"
    #: Sent to a remote engine, which runs it; no lease: any worker polls it when due.
    SUBMITTED = "submitted"
    #: Every row written and its files final.
    DONE = "done"
    #: Failed for good; ``error`` says why.
    FAILED = "failed"
    #: Its export was cancelled.
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED)


@dataclass(frozen=True)
class ExportRecord:
    id: str
    project: str
    #: Name of a configured source, or a URL (shown redacted).
    source: str
    tables: tuple[str, ...]
    format: str
    compression: str
    #: Name of a configured destination.
    destination: str
    state: ExportState
    options: dict[str, Any] = field(default_factory=dict)
    #: Why it failed, for API callers: plain and classified (egress.failures).
    error: str | None = None
    #: The failure's detail (credentials masked): admin tokens, the CLI and the log.
    error_detail: str | None = None
    idempotency_key: str | None = None
    #: Hash of the normalised request, to tell a replay from a conflicting reuse of a key.
    request_hash: str | None = None
    callback_url: str | None = None
    #: the id of the API token that created it; None from the CLI or the library
    created_by: str | None = None
    manifest: dict[str, Any] | None = None
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    #: Seconds after ``created_at`` past which the reconciler fails the export.
    max_duration: float | None = None
    #: A cancel was asked while tasks were running; workers see it on heartbeat.
    cancel_requested: bool = False
    #: The files of this completed export were removed after the retention period.
    expired_at: float | None = None
    #: The outputs of this cancelled or failed export were removed by the reconciler.
    cleaned_at: float | None = None
    #: ``snapshot: true``: the exported snapshot every task reads (None until taken), the
    #: worker whose session holds it (the coordinator) and when it was taken.
    snapshot_id: str | None = None
    snapshot_owner: str | None = None
    snapshot_at: float | None = None

    @property
    def status(self) -> str:
        """What users see: the state, or ``expired`` for a completed export whose files
        were removed after the retention period."""
        return "expired" if self.expired_at is not None else str(self.state)

    @property
    def outputs_removed(self) -> bool:
        """Its files are gone or about to be (a cancelled export is cleaned at once; a
        failed one after its retention; a completed one when it expires): list none."""
        return (self.state is ExportState.CANCELLED or self.cleaned_at is not None
                or self.expired_at is not None)

    def evolve(self, **changes: Any) -> ExportRecord:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class TaskRecord:
    id: str
    export_id: str
    project: str
    table: str
    #: Order of the task within its export (files and manifest follow it).
    seq: int
    state: TaskState
    #: TaskSpec.to_json(); None until planned (planning happens on first claim).
    spec: dict[str, Any] | None = None
    #: Checkpoint.to_json() of the last committed part.
    checkpoint: dict[str, Any] | None = None
    rows: int = 0
    bytes: int = 0
    rows_estimate: int | None = None
    #: failures since the task last committed a part (it fails at max_attempts)
    attempts: int = 0
    max_attempts: int = 10
    #: every failure, progress or not
    failures: int = 0
    lease_owner: str | None = None
    lease_token: str | None = None
    lease_expires_at: float | None = None
    #: Not claimable before this time (retry backoff).
    run_after: float = 0.0
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: Remote engines only (None: egress reads the source itself): ``direct`` or ``unload``.
    remote_mode: str | None = None
    #: The engine's id of the query submitted for this task, and where to poll it next.
    query_id: str | None = None
    next_uri: str | None = None
    poll_count: int = 0
    next_poll_at: float | None = None
    submitted_at: float | None = None
    polled_at: float | None = None
    claimed_at: float | None = None
    #: The result's columns as the engine described them: [[name, type], ...].
    result_columns: list[list[str]] | None = None
    #: What happened that a user should know (a restart from nothing, a fallback).
    remote_note: str | None = None
    #: A range task of a split table: KeyRange.to_json() of the rows it reads (planned
    #: when the export was created); None: the whole table.
    key_range: dict[str, Any] | None = None

    def evolve(self, **changes: Any) -> TaskRecord:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Heartbeat:
    """What a worker learns when it renews a lease."""

    #: False: the lease is lost (expired and taken, or the task was released): stop writing.
    alive: bool
    #: The export was cancelled: stop after the part in hand.
    cancel_requested: bool = False
    lease_expires_at: float | None = None

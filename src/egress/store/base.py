"""The JobStore contract: every state change is one conditional statement in one transaction.

Operations read noun-then-verb (``task_claim``, ``export_cancel``). Anything fenced by a
lease takes the lease token and returns False when it no longer matches (the lease was
lost): the caller must stop writing at once. Times come from the database's clock.
Implementations: ``egress.store.sql.SqlJobStore`` over SQLAlchemy Core for SQLite (one
file, the embedded default) and PostgreSQL (many workers on many machines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from egress.domain.access import AuditEntry, TokenRecord
from egress.domain.deliveries import (
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryRecord,
    WebhookSecret,
)
from egress.domain.jobs import ExportRecord, ExportState, Heartbeat, TaskRecord
from egress.domain.progress import ExportProgress


@dataclass(frozen=True)
class LeaseEvent:
    """One row of the lease log, written in the same transaction as the change it records."""

    id: int
    task_id: str
    export_id: str
    #: claim | commit | requeue | release | finish | fail | rescue | cancel
    kind: str
    lease_token: str | None
    worker: str | None
    at: float


@dataclass(frozen=True)
class QueueStats:
    """The job store's gauges (``egress.metrics.StoreStats``): counts by state, the queue."""

    #: exports by state (states without exports may be missing)
    exports: dict[str, int]
    #: tasks by state (states without tasks may be missing)
    tasks: dict[str, int]
    #: queued tasks whose ``run_after`` has come: what workers would claim now
    ready: int
    #: how long the oldest of them has been ready (0 when none is)
    oldest_ready_seconds: float


class WorkerStore(Protocol):
    """What a worker needs of the job store: claims, leases, checkpoints, finalizing, the
    reconciler's sweeps, remote polls and webhook deliveries. A worker reaches it either
    directly (``SqlJobStore``) or through the API's worker routes (``store/over_api.py``,
    for workers without database credentials); every method is one call there."""

    # --- lifecycle and readiness ------------------------------------------------------
    def now(self) -> float:
        """The database's clock, seconds since the epoch."""
        ...

    def close(self) -> None: ...

    def schema_current(self) -> bool:
        """Whether the schema is at the newest migration; StoreError if unreachable."""
        ...

    # --- exports: what workers and the reconciler move --------------------------------
    def export_get(self, project: str | None, export_id: str) -> ExportRecord | None:
        """The export if it belongs to ``project`` (None: any project, for workers)."""
        ...

    def export_complete(self, export_id: str, manifest: dict[str, Any]) -> bool:
        """running → completed with its manifest, only if every task is done."""
        ...

    def export_fail(self, export_id: str, error: str) -> bool:
        """Any non-terminal state → failed; its queued tasks → cancelled."""
        ...

    def export_snapshot_set(self, export_id: str, snapshot_id: str, owner: str) -> bool:
        """Record the snapshot every task of the export reads (``snapshot: true``), held by
        worker ``owner``'s coordinating session, stamped with the store's time: only if
        none is recorded and the export is queued or running. False: another coordinator
        won, or the export ended (the caller closes its session)."""
        ...

    def export_list_finalizable(self) -> list[ExportRecord]:
        """Running exports whose tasks are all done (the manifest is still to write)."""
        ...

    def export_list_overdue(self) -> list[ExportRecord]:
        """Non-terminal exports older than their ``max_duration``."""
        ...

    def export_count_active(self, project: str | None = None, *, limit: int | None = None
                            ) -> int:
        """Exports queued or running, in ``project`` or every project (``worker
        --exit-when-idle``); with ``limit`` counting stops there (a cap check)."""
        ...

    def export_list_cancelled_with_outputs(self) -> list[ExportRecord]:
        """Cancelled or failed exports whose outputs are not cleaned up yet."""
        ...

    def export_list_expirable(self, retention_seconds: float) -> list[ExportRecord]:
        """Completed exports finished more than ``retention_seconds`` ago, not expired yet."""
        ...

    def export_expire(self, export_id: str) -> bool:
        """Mark a completed export expired (its files are then removed); False if it is
        not completed or already expired."""
        ...

    def export_mark_cleaned(self, export_id: str) -> bool:
        """Record that the outputs of a cancelled/failed export were removed."""
        ...

    # --- tasks ------------------------------------------------------------------------
    def task_list(self, export_id: str) -> list[TaskRecord]:
        """Tasks of an export in ``seq`` order."""
        ...

    def task_get(self, task_id: str) -> TaskRecord | None: ...

    def task_lease_held(self, task_id: str, token: str) -> bool:
        """Whether ``token`` still holds the task's unexpired lease (a read: checked before
        a worker writes to the sink, so that a writer that slept past its lease — a paused
        VM, SIGSTOP — writes nothing into the new owner's files)."""
        ...

    def task_claim(
        self, worker: str, *, lease_seconds: float, project_cap: int, limit: int = 1,
        source_limits: Mapping[str, int] | None = None,
    ) -> list[TaskRecord]:
        """Lease up to ``limit`` ready tasks: queued, ``run_after`` due, export not
        cancelled; the oldest task of the project with the fewest running tasks first,
        never above ``project_cap`` running tasks per project, nor above
        ``source_limits[name]`` running or submitted tasks of exports from source
        ``name``. Sets a new lease token and ``lease_expires_at``; the export becomes
        running if it was queued."""
        ...

    def task_heartbeat(self, task_id: str, token: str, lease_seconds: float) -> Heartbeat:
        """Renew the lease if ``token`` still holds it."""
        ...

    def task_commit(
        self,
        task_id: str,
        token: str,
        *,
        checkpoint: dict[str, Any],
        rows: int,
        bytes: int,
        spec: dict[str, Any] | None = None,
    ) -> bool:
        """Record a committed part (fenced by ``token``); False = lease lost."""
        ...

    def task_split(self, task_id: str, token: str, ranges: list[dict[str, Any]]) -> bool:
        """Plan a claimed task that was never planned as the key ranges of its table
        (fenced by ``token``; False = lease lost): the task becomes the first range, and
        each further range a new queued task right after it (``seq + k``), in one
        transaction. A range is ``{"key_range", "spec" (None: planned when claimed),
        "rows_estimate"}``."""
        ...

    def task_requeue(
        self,
        task_id: str,
        token: str,
        *,
        delay: float = 0.0,
        error: str | None = None,
        count_attempt: bool = False,
    ) -> bool:
        """running → queued (end of a slice, a transient error with backoff ``delay``,
        or a graceful release); the lease is cleared so any worker may claim it."""
        ...

    def task_finish(self, task_id: str, token: str) -> bool:
        """running → done."""
        ...

    def task_fail(self, task_id: str, token: str, error: str) -> bool:
        """running → failed for good, and its export → failed, in one transaction."""
        ...

    def task_rescue_expired(self) -> int:
        """Requeue running tasks whose lease expired; returns how many."""
        ...

    # --- remote engines (sql_remote.py: submitted tasks hold no lease) ----------------
    def remote_submitted(
        self, task_id: str, token: str, *, query_id: str, next_uri: str | None,
        delay: float, note: str | None = None,
    ) -> bool:
        """running → submitted: the engine has the query; first poll ``delay`` s later."""
        ...

    def remote_take_due(self, *, hold_seconds: float, limit: int) -> list[TaskRecord]:
        """Submitted tasks due for a poll, each held ``hold_seconds`` for this pass."""
        ...

    def remote_polled(self, task: TaskRecord, *, next_uri: str | None, delay: float) -> bool:
        """One more poll (fenced on ``task.poll_count``); the next ``delay`` s later."""
        ...

    def remote_stream(self, task: TaskRecord, *, next_uri: str,
                      columns: list[list[str]]) -> bool:
        """submitted → queued: a slot streams the result from ``next_uri``."""
        ...

    def remote_done(self, task: TaskRecord, *, checkpoint: dict[str, Any], rows: int,
                    bytes: int, spec: dict[str, Any], columns: list[list[str]]) -> bool:
        """submitted → done: the engine wrote the output itself."""
        ...

    def remote_resubmit(self, task: TaskRecord, *, note: str,
                        mode: str | None = None) -> bool:
        """submitted → queued without a query: it is submitted again."""
        ...

    def remote_fail(self, task: TaskRecord, error: str) -> bool:
        """submitted → failed, and its export with it."""
        ...

    def remote_cancelled(self, task: TaskRecord) -> bool:
        """submitted → cancelled (its export ended; the engine was told)."""
        ...

    def remote_restart(self, task_id: str, token: str, *, note: str) -> bool:
        """running → queued from nothing (no checkpoint, no query), fenced by the lease."""
        ...

    def remote_requeue_direct(self, task_id: str, token: str, *, note: str) -> bool:
        """running → queued in direct mode (the engine has no ``system.unload``)."""
        ...

    def remote_list_stale(self, *, claimed_seconds: float, unpolled_seconds: float
                          ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Claimed-never-submitted and submitted-not-polled remote tasks."""
        ...

    def remote_reset_claim(self, task: TaskRecord) -> bool:
        """A claimed, never submitted remote task back to the queue."""
        ...

    def remote_export_dead(self, export_id: str) -> bool:
        """The export is cancelled, failed or gone."""
        ...

    # --- webhook deliveries (store/sql_deliveries.py) ---------------------------------
    def delivery_claim(self, *, lease_seconds: float, limit: int = 1) -> list[DeliveryRecord]:
        """Lease up to ``limit`` due deliveries (pending, ``next_attempt_at`` passed), oldest
        first: each gets a new ``lease_token`` and ``next_attempt_at`` = now +
        ``lease_seconds``, so it is due again by itself if its sender dies."""
        ...

    def delivery_record_attempt(
        self,
        delivery_id: str,
        token: str,
        *,
        outcome: AttemptOutcome,
        duration: float,
        status_code: int | None = None,
        error: str | None = None,
        address: str | None = None,
        worker: str | None = None,
        retry_in: float | None = None,
    ) -> DeliveryRecord | None:
        """Record one attempt (fenced by ``token``) and the delivery's new state in one
        transaction: delivered on success; otherwise pending again in ``retry_in``
        seconds, or failed when ``retry_in`` is None. None: the lease was lost."""
        ...

    def delivery_postpone(self, delivery_id: str, token: str, delay: float) -> bool:
        """Give a claimed delivery back unsent, due in ``delay`` seconds, counting no attempt
        (its receiver's rate limit is reached). False: the lease was lost meanwhile."""
        ...

    def webhook_secret_list(self, project: str) -> list[WebhookSecret]:
        """The project's signing secrets still in use, newest first (may be empty)."""
        ...

    def webhook_secret_ensure(self, project: str, secret: str) -> list[WebhookSecret]:
        """Like webhook_secret_list, but a project without any secret gets ``secret`` as
        its first one."""
        ...


class JobStore(WorkerStore, Protocol):
    """The whole store: the worker's part and what the API, the CLI and tests use."""

    # --- lifecycle --------------------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the schema (Alembic), idempotent."""
        ...

    # --- exports: what API callers and the CLI do -------------------------------------
    def export_create(
        self, export: ExportRecord, tasks: Sequence[TaskRecord], *,
        active_cap: int | None = None, audit: AuditEntry | None = None,
    ) -> tuple[ExportRecord, bool]:
        """Insert the export and its tasks in one transaction; returns (record, created).
        ``audit``: an entry written in that transaction when the export is created.

        With an idempotency key already used in the project: the same ``request_hash``
        returns the existing export and False; another raises IdempotencyConflictError.
        With ``active_cap``: ActiveLimitError if the project has that many exports queued
        or running, counted in the inserting transaction (concurrent creates queue on
        the project, so no interleaving passes the cap).
        """
        ...

    def export_list(
        self,
        project: str,
        *,
        states: Sequence[ExportState] | None = None,
        limit: int = 50,
        before_id: str | None = None,
    ) -> list[ExportRecord]:
        """Newest first; ``before_id`` is the paging cursor (ids sort by creation)."""
        ...

    def export_cancel(self, project: str, export_id: str) -> ExportRecord | None:
        """queued → cancelled at once; running → cancelled with ``cancel_requested``
        (running tasks stop at their next heartbeat). Terminal exports are returned as
        they are. None if not found in the project."""
        ...

    def export_retry(self, project: str, export_id: str) -> ExportRecord | None:
        """failed → queued; its failed/cancelled tasks → queued with attempts reset and
        their checkpoints kept, so they continue where they stopped."""
        ...

    def export_delete(self, project: str, export_id: str) -> bool:
        """Delete a terminal export and its tasks; False if not found or not terminal."""
        ...

    # --- progress (live events) -------------------------------------------------------
    def export_progress_many(self, export_ids: Sequence[str]) -> dict[str, ExportProgress]:
        """State, counters and per-table progress of every export in ``export_ids`` that
        exists, read in one query (any project: callers check access first)."""
        ...

    def export_throughput(self, format: str, limit: int = 50) -> list[tuple[str, int, float]]:
        """``(source, rows, seconds from start to finish)`` of the newest ``limit``
        completed exports in ``format`` (any project): what estimates learn from."""
        ...

    def queue_stats(self) -> QueueStats:
        """Exports and tasks by state and the ready queue, all projects, read together
        (for the metrics gauges: callers cache it for a few seconds)."""
        ...

    # --- tasks ------------------------------------------------------------------------
    def lease_events(self, task_id: str | None = None) -> list[LeaseEvent]:
        """The lease log in order (for tests and audits)."""
        ...

    # --- API tokens (store/sql_tokens.py) ---------------------------------------------
    def token_create(self, token: TokenRecord) -> TokenRecord:
        """Store a new token (its hash only); its project is created if new."""
        ...

    def token_find(self, token_hash: str) -> TokenRecord | None:
        """The token with this SHA-256, revoked or not (callers check ``active``)."""
        ...

    def token_get(self, token_id: str) -> TokenRecord | None:
        """The token with this id, revoked or not."""
        ...

    def token_touch(self, token_id: str, min_interval: float) -> bool:
        """Set ``last_used_at`` to now unless it was set less than ``min_interval`` s ago
        (one write per token per interval, not one per request)."""
        ...

    def token_list(self, project: str | None = None) -> list[TokenRecord]:
        """Tokens of ``project`` (None: every project), oldest first."""
        ...

    def token_revoke(self, token_id: str, project: str | None = None) -> TokenRecord | None:
        """Revoke a token (idempotent); None if there is no such token (in ``project``)."""
        ...

    # --- audit log (store/sql_audit.py) -----------------------------------------------
    def audit_write(self, entry: AuditEntry) -> AuditEntry:
        """Append one entry; the store sets its id and time."""
        ...

    def audit_list(
        self,
        project: str,
        *,
        export_id: str | None = None,
        actions: Sequence[str] | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditEntry]:
        """Entries of ``project`` (of one export, of some actions, if given), newest first."""
        ...

    # --- webhook deliveries, as callers see them --------------------------------------
    def delivery_replay(
        self, project: str, export_id: str, delivery_id: str
    ) -> DeliveryRecord | None:
        """Make a delivery due now in a new retry round (same ``webhook-id``), unless a
        worker is sending it right now; None if not found in the project's export."""
        ...

    def delivery_get(self, project: str | None, delivery_id: str) -> DeliveryRecord | None:
        ...

    def delivery_list(self, project: str, export_id: str) -> list[DeliveryRecord]:
        """Deliveries of an export, oldest first."""
        ...

    def delivery_attempt_list(self, project: str, export_id: str) -> list[DeliveryAttempt]:
        """Every attempt of every delivery of an export, by delivery and attempt number."""
        ...

    def webhook_secret_rotate(
        self, project: str, secret: str, *, previous_expire_in: float
    ) -> list[WebhookSecret]:
        """Make ``secret`` the newest; the older ones keep signing for
        ``previous_expire_in`` seconds (0: stop at once). Returns the active secrets."""
        ...


#: The operations a worker may call through the API's worker routes.
WORKER_OPERATIONS = frozenset(
    name for name in vars(WorkerStore) if not name.startswith("_") and name != "close"
)

"""SqlJobStore: the JobStore on SQLAlchemy Core, one code path for SQLite and PostgreSQL.

Every state change is one conditional UPDATE (``… WHERE id = :id AND lease_token = :t
AND state = 'running' RETURNING …``); what goes with it (the lease log, the export's
state, the webhook outbox) is written in the same transaction. Zero rows means the
condition no longer holds (a lost lease, an export that moved on): the operation
returns False or None and changes nothing.

The code is split by subject: ``core`` (transactions, clock, companion writes),
``sql_exports``, ``sql_tasks``, ``sql_progress``, ``sql_tokens``, ``sql_audit``,
``sql_deliveries`` and ``claim``. What differs by dialect is confined to ``dialect``
(clock, tokens, connection setup) and the claims' ``SKIP LOCKED``. All SQL of egress
lives in this package.
"""

from __future__ import annotations

from egress.store.sql_audit import AuditOps
from egress.store.sql_deliveries import DeliveryOps
from egress.store.sql_exports import ExportOps
from egress.store.sql_progress import ProgressOps
from egress.store.sql_remote import RemoteOps
from egress.store.sql_tasks import TaskOps
from egress.store.sql_tokens import TokenOps


class SqlJobStore(ExportOps, TaskOps, RemoteOps, ProgressOps, TokenOps, AuditOps,
                  DeliveryOps):
    """A job store at ``url``: ``sqlite:///PATH`` or ``postgresql://…`` (psycopg 3).

    Thread-safe (a connection pool); several processes may share one store.
    Operations raise StoreError when the database cannot be reached (transient).
    """


__all__ = ["SqlJobStore"]

"""Audit log and readiness operations of SqlJobStore."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from egress.domain.access import AuditEntry
from egress.store.core import SqlCore
from egress.store.schema import audit_log


def audit_entry(row: sa.Row[Any]) -> AuditEntry:
    m = row._mapping
    return AuditEntry(
        id=m["id"], project=m["project"], action=m["action"], token_id=m["token_id"],
        export_id=m["export_id"], client_address=m["client_address"],
        details=m["details"] or {}, at=m["at"],
    )


def audit_insert(now: sa.ColumnElement[Any]) -> sa.Insert:
    """The audit log's INSERT, built once per store, its values bound at execution
    (building it per call cost more CPU than running it)."""
    return audit_log.insert().values(at=now).returning(*audit_log.c)


def audit_values(entry: AuditEntry) -> dict[str, Any]:
    return {"project": entry.project, "token_id": entry.token_id, "action": entry.action,
            "export_id": entry.export_id,
            "client_address": entry.client_address[:64] if entry.client_address else None,
            "details": dict(entry.details)}


class AuditOps(SqlCore):
    @functools.cached_property
    def _audit_insert(self) -> sa.Insert:
        return audit_insert(self._now)

    def audit_write(self, entry: AuditEntry) -> AuditEntry:
        row = audit_values(entry)
        return audit_entry(self._tx(lambda c: c.execute(self._audit_insert, row).one()))

    def audit_list(
        self,
        project: str,
        *,
        export_id: str | None = None,
        actions: Sequence[str] | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditEntry]:
        query = sa.select(audit_log).where(audit_log.c.project == project)
        if export_id is not None:
            query = query.where(audit_log.c.export_id == export_id)
        if actions:
            query = query.where(audit_log.c.action.in_(list(actions)))
        if before_id is not None:
            query = query.where(audit_log.c.id < before_id)
        query = query.order_by(audit_log.c.id.desc()).limit(limit)
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [audit_entry(r) for r in rows]

    def schema_current(self) -> bool:
        """Whether the store is reachable and migrated to the newest revision this code
        knows (``/readyz``); raises StoreError when it cannot be reached."""
        from egress.store.migrations import is_current

        return self._tx(is_current, read_only=True)

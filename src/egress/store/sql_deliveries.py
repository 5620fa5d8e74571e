"""Webhook delivery operations of SqlJobStore: claim, record an attempt, replay, list,
and the per-project signing secrets.

The outbox rows themselves are written by the export operations, in the transaction
that ends the export (``core._outbox``). A delivery is *due* when it is pending and
``next_attempt_at`` has passed. Claiming one is a lease: it gets a new ``lease_token``
and ``next_attempt_at`` moves to the end of the lease, so a worker that dies while
sending leaves a row that becomes due again by itself, and two workers never hold the
same attempt. Recording the attempt is fenced by the token.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.deliveries import (
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryRecord,
    DeliveryState,
    WebhookSecret,
)
from egress.domain.ids import new_id
from egress.exceptions import StoreError
from egress.store.core import SqlCore
from egress.store.schema import deliveries as d
from egress.store.schema import delivery_attempts, webhook_secrets

#: Attempts of a rotation that collided with a concurrent one (PostgreSQL).
ROTATE_ATTEMPTS = 3


def delivery_record(row: sa.Row[Any]) -> DeliveryRecord:
    m = row._mapping
    return DeliveryRecord(
        id=m["id"], export_id=m["export_id"], project=m["project"],
        event_type=m["event_type"], url=m["url"], payload=m["payload"],
        state=DeliveryState(m["state"]), attempts=m["attempts"],
        next_attempt_at=m["next_attempt_at"], last_error=m["last_error"],
        created_at=m["created_at"], updated_at=m["updated_at"], lease_token=m["lease_token"],
        round_started_at=m["round_started_at"] or m["created_at"],
        round_attempts=m["round_attempts"],
    )


def attempt_record(row: sa.Row[Any]) -> DeliveryAttempt:
    m = row._mapping
    return DeliveryAttempt(
        delivery_id=m["delivery_id"], attempt=m["attempt"], at=m["at"],
        outcome=AttemptOutcome(m["outcome"]), status_code=m["status_code"], error=m["error"],
        duration=m["duration"], address=m["address"], worker=m["worker"],
    )


def secret_record(row: sa.Row[Any]) -> WebhookSecret:
    m = row._mapping
    return WebhookSecret(
        id=m["id"], project=m["project"], generation=m["generation"], secret=m["secret"],
        created_at=m["created_at"], expires_at=m["expires_at"],
    )


class DeliveryOps(SqlCore):
    # --- deliveries ---------------------------------------------------------------------

    def _due(self) -> sa.ColumnElement[bool]:
        return sa.and_(d.c.state == "pending", d.c.next_attempt_at <= self._now)

    def delivery_claim(self, *, lease_seconds: float, limit: int = 1) -> list[DeliveryRecord]:
        # PostgreSQL: SKIP LOCKED lets concurrent claimers pass each other's candidates,
        # and the outer WHERE re-checks that the row is still due (not claimed and
        # committed by another worker meanwhile). SQLite: BEGIN IMMEDIATE serialises.
        candidate = (
            sa.select(d.c.id)
            .where(self._due())
            .order_by(d.c.next_attempt_at, d.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("candidate")
        )
        stmt = (
            sa.update(d)
            .where(d.c.id.in_(sa.select(candidate.c.id)), self._due())
            .values(lease_token=self._token, next_attempt_at=self._seconds(lease_seconds),
                    updated_at=self._now)
            .returning(*d.c)
        )
        # Every worker asks every second: a read first, so that an empty outbox costs no
        # write lock (SQLite) and no row locks (PostgreSQL).
        any_due = sa.select(d.c.id).where(self._due()).limit(1)
        if self._tx(lambda c: c.execute(any_due).first(), read_only=True) is None:
            return []
        rows = self._tx(lambda c: c.execute(stmt).all())
        return sorted((delivery_record(r) for r in rows), key=lambda r: (r.created_at, r.id))

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
        success = outcome is AttemptOutcome.SUCCESS
        if success:
            state = DeliveryState.DELIVERED
        else:
            state = DeliveryState.PENDING if retry_in is not None else DeliveryState.FAILED
        stmt = (
            sa.update(d)
            .where(d.c.id == delivery_id, d.c.lease_token == token, d.c.state == "pending")
            .values(
                state=state.value, lease_token=None, attempts=d.c.attempts + 1,
                round_attempts=d.c.round_attempts + 1,
                next_attempt_at=(self._seconds(retry_in) if state is DeliveryState.PENDING
                                 else self._now),
                last_error=None if success else error, updated_at=self._now,
            )
            .returning(*d.c)
        )

        def run(conn: Connection) -> DeliveryRecord | None:
            row = conn.execute(stmt).first()
            if row is None:  # the lease was lost: another worker owns this delivery now
                return None
            conn.execute(delivery_attempts.insert().values(
                delivery_id=delivery_id, attempt=row.attempts,
                at=row.updated_at - max(0.0, duration), outcome=outcome.value,
                status_code=status_code, error=error, duration=max(0.0, duration),
                address=address, worker=worker,
            ))
            return delivery_record(row)

        return self._tx(run)

    def delivery_postpone(self, delivery_id: str, token: str, delay: float) -> bool:
        stmt = (
            sa.update(d)
            .where(d.c.id == delivery_id, d.c.lease_token == token, d.c.state == "pending")
            .values(lease_token=None, next_attempt_at=self._seconds(max(0.0, delay)),
                    updated_at=self._now)
        )
        return bool(self._tx(lambda c: c.execute(stmt).rowcount))

    def delivery_replay(
        self, project: str, export_id: str, delivery_id: str
    ) -> DeliveryRecord | None:
        in_export = sa.and_(d.c.id == delivery_id, d.c.project == project,
                            d.c.export_id == export_id)
        stmt = (
            sa.update(d)
            # Not while a worker holds a live lease on it: it is being sent right now.
            .where(in_export, sa.or_(d.c.lease_token.is_(None), d.c.next_attempt_at <= self._now))
            .values(state="pending", lease_token=None, next_attempt_at=self._now,
                    round_started_at=self._now, round_attempts=0, updated_at=self._now)
            .returning(*d.c)
        )

        def run(conn: Connection) -> DeliveryRecord | None:
            row = conn.execute(stmt).first()
            if row is None:  # in flight, or not in this project/export
                row = conn.execute(sa.select(d).where(in_export)).first()
            return delivery_record(row) if row is not None else None

        return self._tx(run)

    def delivery_get(self, project: str | None, delivery_id: str) -> DeliveryRecord | None:
        query = sa.select(d).where(d.c.id == delivery_id)
        if project is not None:
            query = query.where(d.c.project == project)
        row = self._tx(lambda c: c.execute(query).first(), read_only=True)
        return delivery_record(row) if row is not None else None

    def delivery_list(self, project: str, export_id: str) -> list[DeliveryRecord]:
        query = (
            sa.select(d)
            .where(d.c.project == project, d.c.export_id == export_id)
            .order_by(d.c.created_at, d.c.id)
        )
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [delivery_record(r) for r in rows]

    def delivery_attempt_list(self, project: str, export_id: str) -> list[DeliveryAttempt]:
        a = delivery_attempts
        query = (
            sa.select(a)
            .join(d, d.c.id == a.c.delivery_id)
            .where(d.c.project == project, d.c.export_id == export_id)
            .order_by(a.c.delivery_id, a.c.attempt)
        )
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [attempt_record(r) for r in rows]

    # --- signing secrets ----------------------------------------------------------------

    def _active_secrets(self, conn: Connection, project: str) -> list[WebhookSecret]:
        w = webhook_secrets
        rows = conn.execute(
            sa.select(w)
            .where(w.c.project == project,
                   sa.or_(w.c.expires_at.is_(None), w.c.expires_at > self._now))
            .order_by(w.c.generation.desc())
        ).all()
        return [secret_record(r) for r in rows]

    def webhook_secret_list(self, project: str) -> list[WebhookSecret]:
        return self._tx(lambda c: self._active_secrets(c, project), read_only=True)

    def webhook_secret_ensure(self, project: str, secret: str) -> list[WebhookSecret]:
        w = webhook_secrets
        first = (
            sa.select(sa.literal(new_id("whs")), sa.literal(project), sa.literal(1),
                      sa.literal(secret), self._now)
            .where(~sa.exists().where(w.c.project == project))
        )
        insert = (
            self._insert(w)
            .from_select(["id", "project", "generation", "secret", "created_at"], first)
            .on_conflict_do_nothing(index_elements=["project", "generation"])
        )

        def run(conn: Connection) -> list[WebhookSecret]:
            self._ensure_project(conn, project)
            conn.execute(insert)  # a concurrent first secret wins; this one is dropped
            return self._active_secrets(conn, project)

        return self._tx(run)

    def webhook_secret_rotate(
        self, project: str, secret: str, *, previous_expire_in: float
    ) -> list[WebhookSecret]:
        w = webhook_secrets
        until = self._seconds(max(0.0, previous_expire_in))
        next_generation = (
            sa.select(sa.func.coalesce(sa.func.max(w.c.generation), 0) + 1)
            .where(w.c.project == project)
            .scalar_subquery()
        )

        def run(conn: Connection) -> list[WebhookSecret]:
            self._ensure_project(conn, project)
            # Older secrets sign until ``until`` (an earlier expiry stays earlier).
            conn.execute(
                sa.update(w)
                .where(w.c.project == project,
                       sa.or_(w.c.expires_at.is_(None), w.c.expires_at > until))
                .values(expires_at=until)
            )
            conn.execute(w.insert().values(
                id=new_id("whs"), project=project, generation=next_generation, secret=secret,
                created_at=self._now, expires_at=None,
            ))
            # Expired secrets are purged (after the insert: generations keep counting up).
            conn.execute(sa.delete(w).where(w.c.project == project, w.c.expires_at <= self._now))
            return self._active_secrets(conn, project)

        for attempt in range(1, ROTATE_ATTEMPTS + 1):
            try:
                return self._tx(run, passthrough=(sa.exc.IntegrityError,))
            except sa.exc.IntegrityError as exc:
                # A concurrent rotation took the same generation: run again on top of it.
                if attempt == ROTATE_ATTEMPTS:
                    raise StoreError(
                        f"webhook secret of project {project!r} could not be rotated: "
                        "concurrent rotations kept colliding; try again"
                    ) from exc
        raise AssertionError("unreachable")

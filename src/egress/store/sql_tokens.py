"""API token operations of SqlJobStore: create, find by hash, touch, list, revoke.

``token_revocations`` counts the revocations made through this store object, so a cache
of tokens in the same process (the API's, see egress.api.auth) can drop its entries at
once; a revocation made by another process reaches such a cache only when its entries
expire.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from egress.domain.access import TokenRecord
from egress.store.core import SqlCore
from egress.store.schema import api_tokens, projects


def token_record(row: sa.Row[Any]) -> TokenRecord:
    m = row._mapping
    return TokenRecord(
        id=m["id"], project=m["project"], name=m["name"], token_hash=m["token_hash"],
        scopes=tuple(m["scopes"]), created_at=m["created_at"],
        last_used_at=m["last_used_at"], revoked_at=m["revoked_at"],
    )


class TokenOps(SqlCore):
    #: Revocations made through this store object (read without a lock: an int).
    token_revocations: int = 0

    def token_create(self, token: TokenRecord) -> TokenRecord:
        def run(conn: Connection) -> TokenRecord:
            conn.execute(
                self._insert(projects)
                .values(id=token.project, created_at=self._now)
                .on_conflict_do_nothing(index_elements=["id"])
            )
            row = conn.execute(
                api_tokens.insert()
                .values(id=token.id, project=token.project, name=token.name,
                        token_hash=token.token_hash, scopes=list(token.scopes),
                        created_at=self._now, last_used_at=None, revoked_at=None)
                .returning(*api_tokens.c)
            ).one()
            return token_record(row)

        try:
            return self._tx(run)
        finally:
            # after the commit: a cache filled from a read before it sees the count
            # change and drops that entry (any change will do: threads may race here)
            self.token_revocations += 1

    def token_find(self, token_hash: str) -> TokenRecord | None:
        query = sa.select(api_tokens).where(api_tokens.c.token_hash == token_hash)
        row = self._tx(lambda c: c.execute(query).first(), read_only=True)
        return token_record(row) if row is not None else None

    def token_get(self, token_id: str) -> TokenRecord | None:
        query = sa.select(api_tokens).where(api_tokens.c.id == token_id)
        row = self._tx(lambda c: c.execute(query).first(), read_only=True)
        return token_record(row) if row is not None else None

    def token_touch(self, token_id: str, min_interval: float) -> bool:
        stmt = (
            sa.update(api_tokens)
            .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None),
                   sa.or_(api_tokens.c.last_used_at.is_(None),
                          api_tokens.c.last_used_at < self._seconds(-min_interval)))
            .values(last_used_at=self._now)
            .returning(api_tokens.c.id)
        )
        return self._tx(lambda c: c.execute(stmt).first() is not None)

    def token_list(self, project: str | None = None) -> list[TokenRecord]:
        query = sa.select(api_tokens).order_by(api_tokens.c.id)
        if project is not None:
            query = query.where(api_tokens.c.project == project)
        rows = self._tx(lambda c: c.execute(query).all(), read_only=True)
        return [token_record(r) for r in rows]

    def token_revoke(self, token_id: str, project: str | None = None) -> TokenRecord | None:
        stmt = (
            sa.update(api_tokens)
            .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=self._now)
            .returning(*api_tokens.c)
        )
        if project is not None:
            stmt = stmt.where(api_tokens.c.project == project)

        def run(conn: Connection) -> TokenRecord | None:
            row = conn.execute(stmt).first()
            if row is None:  # revoked already, or not in this project
                query = sa.select(api_tokens).where(api_tokens.c.id == token_id)
                if project is not None:
                    query = query.where(api_tokens.c.project == project)
                row = conn.execute(query).first()
            return token_record(row) if row is not None else None

        try:
            return self._tx(run)
        finally:
            # after the commit: a cache filled from a read before it sees the count
            # change and drops that entry (any change will do: threads may race here)
            self.token_revocations += 1

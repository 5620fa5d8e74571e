"""API tokens and the audit log in the store (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from egress.domain.access import AuditEntry, TokenRecord, hash_token, new_token
from egress.domain.ids import new_id
from egress.exceptions import StoreError
from egress.store.sql import SqlJobStore


def make_token(store: SqlJobStore, project: str = "p", scopes=("exports:read",)) -> tuple[
    str, TokenRecord
]:
    secret = new_token()
    record = store.token_create(TokenRecord(
        id=new_id("tok"), project=project, name="ci", token_hash=hash_token(secret),
        scopes=tuple(scopes),
    ))
    return secret, record


def test_a_token_is_found_by_its_hash_only(store: SqlJobStore):
    secret, record = make_token(store, scopes=("exports:read", "exports:create"))
    assert record.created_at > 0 and record.active and record.last_used_at is None
    assert store.token_find(hash_token(secret)) == record
    assert store.token_find(hash_token(secret + "x")) is None
    # the secret itself is stored nowhere
    with store.engine.connect() as conn:
        dump = repr(conn.execute(sa.text("SELECT * FROM api_tokens")).all())
    assert secret not in dump and record.token_hash in dump


def test_token_hashes_are_unique(store: SqlJobStore):
    _, record = make_token(store)
    with pytest.raises(StoreError, match="refused"):
        store.token_create(TokenRecord(id=new_id("tok"), project="p", name="again",
                                       token_hash=record.token_hash, scopes=("admin",)))


def test_touch_writes_at_most_once_per_interval(store: SqlJobStore):
    _, record = make_token(store)
    assert store.token_touch(record.id, 60.0) is True
    first = store.token_list("p")[0].last_used_at
    assert first is not None
    assert store.token_touch(record.id, 60.0) is False
    assert store.token_list("p")[0].last_used_at == first
    assert store.token_touch(record.id, 0.0) is True
    assert store.token_list("p")[0].last_used_at >= first


def test_revoke_is_scoped_by_project_and_idempotent(store: SqlJobStore):
    secret, record = make_token(store, project="alpha")
    assert store.token_revoke(record.id, "beta") is None
    assert store.token_find(hash_token(secret)).active
    revoked = store.token_revoke(record.id, "alpha")
    assert revoked is not None and revoked.revoked_at is not None and not revoked.active
    assert store.token_revoke(record.id, "alpha") == revoked
    assert store.token_touch(record.id, 0.0) is False  # a revoked token is never touched
    assert store.token_revoke("tok_missing") is None


def test_list_by_project(store: SqlJobStore):
    _, a = make_token(store, project="alpha")
    _, b = make_token(store, project="beta")
    assert [t.id for t in store.token_list("alpha")] == [a.id]
    assert {t.id for t in store.token_list()} == {a.id, b.id}


def test_audit_entries_are_per_project_newest_first(store: SqlJobStore):
    for i in range(3):
        store.audit_write(AuditEntry(project="alpha", action="export.create", token_id="tok_a",
                                     export_id=f"exp_{i}", client_address="10.0.0.1",
                                     details={"i": i}))
    store.audit_write(AuditEntry(project="beta", action="export.cancel", export_id="exp_0"))
    entries = store.audit_list("alpha")
    assert [e.export_id for e in entries] == ["exp_2", "exp_1", "exp_0"]
    assert entries[0].details == {"i": 2} and entries[0].client_address == "10.0.0.1"
    assert entries[0].at > 0 and entries[0].id > entries[1].id
    assert [e.export_id for e in store.audit_list("alpha", before_id=entries[0].id, limit=1)] \
        == ["exp_1"]
    assert [e.action for e in store.audit_list("beta", export_id="exp_0")] == ["export.cancel"]
    assert store.audit_list("alpha", export_id="exp_9") == []


def test_schema_is_current_after_migrate(store: SqlJobStore):
    assert store.schema_current() is True

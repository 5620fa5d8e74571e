"""A failure's plain message and its detail are recorded apart: ``error`` (tasks, the
export, the webhook payload) holds the plain one, ``error_detail`` the export's detail."""

from __future__ import annotations

from egress.domain.jobs import ExportState
from egress.exceptions import SourceUnavailableError
from egress.failures import describe_failure
from egress.store.sql import SqlJobStore


def test_task_fail_records_the_public_message_and_the_detail(store: SqlJobStore,
                                                             make_export):
    record, _ = make_export("p", ("a", "b"), callback_url="https://hooks.example.com/x")
    a, b = store.task_claim("w", lease_seconds=30, project_cap=10, limit=2)
    exc = SourceUnavailableError("cannot open SQLite database /srv/data/shop.db: no such file")
    assert store.task_requeue(b.id, b.lease_token, error=describe_failure(exc))
    assert store.task_fail(a.id, a.lease_token, describe_failure(exc))
    failed = store.export_get("p", record.id)
    assert failed.state is ExportState.FAILED
    assert failed.error is not None and failed.error.startswith("table 'a': the source")
    assert "/srv" not in failed.error
    assert failed.error_detail == f"table 'a': {exc}"
    assert {t.error for t in store.task_list(record.id)} == {describe_failure(exc).public}
    [delivery] = store.delivery_list("p", record.id)
    assert delivery.payload["data"]["error"] == failed.error
    # egress's own messages are plain already: no detail
    other, _ = make_export("p", ("c",))
    assert store.export_fail(other.id, "export did not finish within 60 s")
    again = store.export_get("p", other.id)
    assert (again.error, again.error_detail) == ("export did not finish within 60 s", None)
    # a retry clears both
    assert store.export_retry("p", record.id) is not None
    retried = store.export_get("p", record.id)
    assert (retried.error, retried.error_detail) == (None, None)


def test_the_store_records_no_credentials(store: SqlJobStore, make_export):
    """Whoever builds the message, what the store records is redacted."""
    record, _ = make_export("p", ("a",))
    [a] = store.task_claim("w", lease_seconds=30, project_cap=10, limit=1)
    assert store.task_requeue(a.id, a.lease_token,
                              error="connection to postgresql://u:Sekr1t@db/x refused")
    assert "Sekr1t" not in str(store.task_get(a.id).error)
    assert store.export_fail(record.id, "dsn host=db password=Sekr1t failed")
    assert "Sekr1t" not in str(store.export_get("p", record.id).error)

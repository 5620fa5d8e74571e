"""Conformance: a task's ``attempts`` counts failures since its last progress (a committed
part starts it over), ``failures`` counts them all."""

from __future__ import annotations

from egress.store.sql import SqlJobStore


def _claim(store: SqlJobStore):
    [task] = store.task_claim("w", lease_seconds=5, project_cap=10)
    return task


def test_progress_starts_the_count_over_and_failures_add_up(store: SqlJobStore,
                                                            make_export) -> None:
    make_export("p", ("t",))
    task = _claim(store)
    for _ in range(2):  # two failures without progress
        assert store.task_requeue(task.id, task.lease_token, error="reset", count_attempt=True)
        task = _claim(store)
    assert (task.attempts, task.failures) == (2, 2)

    # a part committed: the streak ends; the total stays
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 10}, rows=10,
                             bytes=500)
    assert store.task_requeue(task.id, task.lease_token, error="reset", count_attempt=True)
    task = _claim(store)
    assert (task.attempts, task.failures) == (1, 3)
    # a commit without a new part (the plan persisted, say) is not progress
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 10}, rows=10,
                             bytes=500, spec={"table": "t"})
    assert store.task_get(task.id).attempts == 1
    # a slice that ends without a failure counts nothing
    assert store.task_requeue(task.id, task.lease_token)
    task = _claim(store)
    assert (task.attempts, task.failures) == (1, 3)
    assert store.task_fail(task.id, task.lease_token, "for good")
    failed = store.task_get(task.id)
    assert (failed.attempts, failed.failures) == (2, 4)

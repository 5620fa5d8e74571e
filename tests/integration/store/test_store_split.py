"""Conformance: ``task_split`` — a claimed task becomes the first of its table's key
ranges and the others are queued right after it, in one fenced write."""

from __future__ import annotations

from egress.domain.jobs import ExportState, TaskState
from egress.domain.ranges import ranges_from_bounds
from egress.store.sql import SqlJobStore


def _ranges(bounds: list[int]) -> list[dict]:
    return [{"key_range": r.to_json(), "spec": {"table": "a", "n": r.index} if r.index else None,
             "rows_estimate": 10 + r.index} for r in ranges_from_bounds("id", bounds)]


def test_a_split_makes_the_claimed_task_the_first_range(store: SqlJobStore, make_export):
    export, [task] = make_export("p", ("a",))
    [claimed] = store.task_claim("w1", lease_seconds=30, project_cap=10)
    ranges = _ranges([100, 200])
    assert store.task_split(claimed.id, claimed.lease_token, ranges)
    tasks = store.task_list(export.id)
    assert [t.key_range for t in tasks] == [r["key_range"] for r in ranges]
    assert [t.spec for t in tasks] == [r["spec"] for r in ranges]
    assert [t.rows_estimate for t in tasks] == [10, 11, 12]
    first, *rest = tasks
    assert first.id == task.id and first.state is TaskState.RUNNING
    assert first.lease_token == claimed.lease_token  # the planner goes on with range 1
    assert [t.seq for t in tasks] == [task.seq, task.seq + 1, task.seq + 2]
    for t in rest:
        assert t.state is TaskState.QUEUED and t.lease_token is None
        assert (t.export_id, t.project, t.table, t.max_attempts) == (
            export.id, "p", "a", task.max_attempts)
        assert t.created_at == task.created_at and t.rows == 0 and t.checkpoint is None
    # the other ranges are claimable at once, by other workers
    taken = store.task_claim("w2", lease_seconds=30, project_cap=10, limit=5)
    assert sorted(t.id for t in taken) == sorted(t.id for t in rest)
    # the export ends only with its last range
    assert store.task_finish(first.id, claimed.lease_token)
    assert store.export_get(None, export.id).state is ExportState.RUNNING


def test_a_split_with_a_lost_lease_changes_nothing(store: SqlJobStore, make_export):
    export, _ = make_export("p", ("a",))
    [claimed] = store.task_claim("w1", lease_seconds=30, project_cap=10)
    before = store.task_list(export.id)
    assert not store.task_split(claimed.id, "not-the-token", _ranges([5]))
    assert store.task_requeue(claimed.id, claimed.lease_token)
    assert not store.task_split(claimed.id, claimed.lease_token, _ranges([5]))  # released
    after = store.task_list(export.id)
    assert [(t.id, t.key_range, t.spec) for t in after] == [
        (t.id, t.key_range, t.spec) for t in before]


def test_ranges_planned_while_the_export_was_cancelled_are_not_queued(
    store: SqlJobStore, make_export,
):
    export, _ = make_export("p", ("a",))
    [claimed] = store.task_claim("w1", lease_seconds=30, project_cap=10)
    store.export_cancel("p", export.id)  # the planner's lease holds until its next beat
    assert store.task_split(claimed.id, claimed.lease_token, _ranges([100, 200]))
    _first, *rest = store.task_list(export.id)
    assert [t.state for t in rest] == [TaskState.CANCELLED] * 2
    assert store.task_claim("w2", lease_seconds=30, project_cap=10, limit=5) == []

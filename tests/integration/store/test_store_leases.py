"""Conformance: leases — heartbeat, fencing by token, commit, finish, fail, rescue, the log."""

from __future__ import annotations

import time

import pytest

from egress.domain.jobs import ExportState, TaskRecord, TaskState
from egress.store.sql import SqlJobStore


def _claim(store: SqlJobStore, worker: str = "w1", lease: float = 30) -> TaskRecord:
    [task] = store.task_claim(worker, lease_seconds=lease, project_cap=10)
    return task


def _fenced_calls(store: SqlJobStore, task_id: str, token: str) -> dict[str, object]:
    return {
        "heartbeat": store.task_heartbeat(task_id, token, 30).alive,
        "commit": store.task_commit(task_id, token, checkpoint={"stale": True}, rows=9,
                                    bytes=9),
        "requeue": store.task_requeue(task_id, token, delay=5, error="stale"),
        "finish": store.task_finish(task_id, token),
        "fail": store.task_fail(task_id, token, "stale"),
    }


def test_commit_records_checkpoint_totals_and_spec(store: SqlJobStore, make_export):
    make_export("p", ("a",))
    task = _claim(store)
    spec = {"table": "a", "part_rows": 100}
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 0}, rows=0,
                             bytes=0, spec=spec)
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 100}, rows=100,
                             bytes=4096)
    stored = store.task_get(task.id)
    assert stored.checkpoint == {"rows": 100} and stored.rows == 100 and stored.bytes == 4096
    assert stored.spec == spec  # not given on the second commit: kept
    assert stored.state is TaskState.RUNNING and stored.lease_token == task.lease_token


def test_heartbeat_renews_the_lease(store: SqlJobStore, make_export, pass_store_time):
    make_export("p", ("a",))
    task = _claim(store, lease=4.0)
    time.sleep(0.2)
    beat = store.task_heartbeat(task.id, task.lease_token, 20.0)
    assert beat.alive and not beat.cancel_requested
    assert beat.lease_expires_at >= task.lease_expires_at + 0.1
    assert store.task_get(task.id).lease_expires_at == beat.lease_expires_at
    pass_store_time(task.lease_expires_at)  # past the first lease, within the renewed one
    assert store.task_rescue_expired() == 0
    assert store.task_get(task.id).lease_token == task.lease_token


def test_stale_token_changes_nothing(store: SqlJobStore, make_export):
    make_export("p", ("a",))
    task = _claim(store)
    assert store.task_commit(task.id, task.lease_token, checkpoint={"rows": 5}, rows=5, bytes=50)
    before, events = store.task_get(task.id), store.lease_events()
    calls = _fenced_calls(store, task.id, "0" * 32)
    assert calls == dict.fromkeys(calls, False)
    assert store.task_get(task.id) == before
    assert store.lease_events() == events
    assert store.export_get("p", task.export_id).state is ExportState.RUNNING


def test_expired_lease_is_rescued_and_the_old_owner_is_fenced_off(store: SqlJobStore, make_export,
                                                                  pass_store_time):
    make_export("p", ("a",))
    # a lease long enough that no stall of a loaded machine ends it before the first
    # rescue (one of 5 s did end in a CI run); then a heartbeat shortens it
    old = _claim(store, "sleepy", lease=120.0)
    assert store.task_commit(old.id, old.lease_token, checkpoint={"rows": 10}, rows=10, bytes=1)
    assert store.task_rescue_expired() == 0  # not yet expired
    beat = store.task_heartbeat(old.id, old.lease_token, 0.5)
    assert beat.alive and beat.lease_expires_at is not None
    pass_store_time(beat.lease_expires_at)
    assert store.task_rescue_expired() == 1
    rescued = store.task_get(old.id)
    assert rescued.state is TaskState.QUEUED and rescued.lease_token is None
    assert rescued.checkpoint == {"rows": 10} and rescued.attempts == 0
    assert store.task_rescue_expired() == 0
    new = _claim(store, "fresh")
    assert new.id == old.id and new.lease_token != old.lease_token
    # The frozen worker wakes up: every write it tries is refused.
    before = store.task_get(old.id)
    calls = _fenced_calls(store, old.id, old.lease_token)
    assert calls == dict.fromkeys(calls, False)
    assert store.task_get(old.id) == before
    # The new owner is unaffected.
    assert store.task_commit(new.id, new.lease_token, checkpoint={"rows": 20}, rows=20, bytes=2)
    assert store.task_finish(new.id, new.lease_token)
    assert [(e.kind, e.worker, e.lease_token) for e in store.lease_events(old.id)] == [
        ("claim", "sleepy", old.lease_token),
        ("commit", "sleepy", old.lease_token),
        ("rescue", "sleepy", old.lease_token),
        ("claim", "fresh", new.lease_token),
        ("commit", "fresh", new.lease_token),
        ("finish", "fresh", new.lease_token),
    ]


def test_rescue_of_a_cancelled_export_cancels_the_task(store: SqlJobStore, make_export,
                                                        pass_store_time):
    record, _ = make_export("p", ("a",))
    task = _claim(store, lease=1.0)
    store.export_cancel("p", record.id)
    assert store.export_get("p", record.id).cancel_requested is True
    pass_store_time(task.lease_expires_at)
    assert store.task_rescue_expired() == 1
    assert store.task_get(task.id).state is TaskState.CANCELLED
    assert store.export_get("p", record.id).cancel_requested is False
    assert [e.kind for e in store.lease_events(task.id)] == ["claim", "cancel"]


@pytest.mark.parametrize("end", ["requeue", "finish", "fail"])
def test_ending_a_lease_clears_it(store: SqlJobStore, make_export, end: str):
    make_export("p", ("a",))
    task = _claim(store)
    if end == "requeue":
        assert store.task_requeue(task.id, task.lease_token)
    elif end == "finish":
        assert store.task_finish(task.id, task.lease_token)
    else:
        assert store.task_fail(task.id, task.lease_token, "no such column")
    ended = store.task_get(task.id)
    expected = {"requeue": TaskState.QUEUED, "finish": TaskState.DONE, "fail": TaskState.FAILED}
    assert ended.state is expected[end]
    assert (ended.lease_owner, ended.lease_token, ended.lease_expires_at) == (None, None, None)
    assert store.task_heartbeat(task.id, task.lease_token, 30).alive is False
    last = store.lease_events(task.id)[-1]
    assert (last.kind, last.lease_token, last.worker) == (end, task.lease_token, "w1")


def test_task_fail_fails_the_export_and_stops_its_siblings(store: SqlJobStore, make_export):
    record, _ = make_export("p", ("a", "b", "c"))
    a, b = store.task_claim("w", lease_seconds=30, project_cap=10, limit=2)
    assert store.task_fail(a.id, a.lease_token, "permission denied for table a")
    failed = store.export_get("p", record.id)
    assert failed.state is ExportState.FAILED
    assert failed.error == "table 'a': permission denied for table a"
    assert failed.cancel_requested is True  # b still runs
    states = [t.state for t in store.task_list(record.id)]
    assert states == [TaskState.FAILED, TaskState.RUNNING, TaskState.CANCELLED]
    assert store.task_get(a.id).error == "permission denied for table a"
    beat = store.task_heartbeat(b.id, b.lease_token, 30)
    assert beat.alive and beat.cancel_requested
    assert store.task_requeue(b.id, b.lease_token)
    assert store.task_get(b.id).state is TaskState.CANCELLED
    assert store.export_get("p", record.id).cancel_requested is False
    assert [e.kind for e in store.lease_events()] == [
        "claim", "claim", "fail", "cancel", "cancel"
    ]


def test_lease_log_is_in_order(store: SqlJobStore, make_export):
    make_export("p", ("a",))
    first = _claim(store, "w1")
    store.task_commit(first.id, first.lease_token, checkpoint={}, rows=1, bytes=1)
    store.task_commit(first.id, first.lease_token, checkpoint={}, rows=2, bytes=2)
    store.task_requeue(first.id, first.lease_token)
    second = _claim(store, "w2")
    store.task_commit(second.id, second.lease_token, checkpoint={}, rows=3, bytes=3)
    store.task_finish(second.id, second.lease_token)
    events = store.lease_events(first.id)
    assert [(e.kind, e.worker) for e in events] == [
        ("claim", "w1"), ("commit", "w1"), ("commit", "w1"), ("requeue", "w1"),
        ("claim", "w2"), ("commit", "w2"), ("finish", "w2"),
    ]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert {e.export_id for e in events} == {first.export_id}
    assert store.lease_events() == events

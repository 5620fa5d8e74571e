"""Conformance: concurrent claimers (threads, then processes) never share a task.

Each task needs three slices (claim → commit → requeue, twice, then finish), so tasks
are claimed again and again while other claimers race for them. Afterwards the lease
log must show, for every task, leases that never overlap: each claim comes after the
previous lease ended, and every commit carries the token of the live lease.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections import defaultdict

from egress.domain.jobs import TaskState
from egress.store.base import LeaseEvent
from egress.store.sql import SqlJobStore

SLICES = 3
WORKER = textwrap.dedent(
    """
    import sys
    from egress.store.sql import SqlJobStore

    def drain(store, worker, slices):
        idle = 0
        while idle < 20:
            claimed = store.task_claim(worker, lease_seconds=60, project_cap=100, limit=2)
            if not claimed:
                idle += 1
                continue
            idle = 0
            for task in claimed:
                done = (task.checkpoint or {}).get("slices", 0) + 1
                ok = store.task_commit(task.id, task.lease_token,
                                       checkpoint={"slices": done}, rows=done, bytes=done)
                assert ok, "lease lost without any rescue"
                if done >= slices:
                    assert store.task_finish(task.id, task.lease_token)
                else:
                    assert store.task_requeue(task.id, task.lease_token)

    if __name__ == "__main__":
        store = SqlJobStore(sys.argv[1])
        drain(store, sys.argv[2], int(sys.argv[3]))
        store.close()
    """
)


def _make_exports(store: SqlJobStore, export_request, projects: int, tasks: int) -> list[str]:
    ids = []
    for i in range(projects * 2):
        record, _ = store.export_create(
            *export_request(f"p{i % projects}", [f"t{j}" for j in range(tasks)])
        )
        ids.append(record.id)
    return ids


def _check_no_overlapping_leases(events: list[LeaseEvent], slices: int) -> None:
    by_task: dict[str, list[LeaseEvent]] = defaultdict(list)
    for e in events:
        by_task[e.task_id].append(e)
    for task_id, log in by_task.items():
        live: str | None = None
        for e in log:
            if e.kind == "claim":
                assert live is None, f"{task_id}: claimed while lease {live} was live"
                live = e.lease_token
            else:
                assert e.lease_token == live, f"{task_id}: {e.kind} by a stale token"
                if e.kind in ("requeue", "finish"):
                    live = None
        assert live is None
        assert [e.kind for e in log].count("claim") == slices
        assert log[-1].kind == "finish"


def _check_all_done(store: SqlJobStore, export_ids: list[str]) -> None:
    for export_id in export_ids:
        for task in store.task_list(export_id):
            assert task.state is TaskState.DONE
            assert task.checkpoint == {"slices": SLICES}


def test_threads_never_claim_a_task_twice(store: SqlJobStore, store_url: str, export_request):
    export_ids = _make_exports(store, export_request, projects=3, tasks=4)  # 24 tasks
    namespace: dict[str, object] = {}
    exec(compile(WORKER, "worker", "exec"), namespace)
    drain = namespace["drain"]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        worker_store = SqlJobStore(store_url)
        try:
            drain(worker_store, f"thread-{n}", SLICES)  # type: ignore[operator]
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            worker_store.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    _check_all_done(store, export_ids)
    events = store.lease_events()
    _check_no_overlapping_leases(events, SLICES)
    assert len({e.worker for e in events}) > 1  # the work was actually shared


def test_processes_never_claim_a_task_twice(store: SqlJobStore, store_url: str, export_request):
    export_ids = _make_exports(store, export_request, projects=2, tasks=5)  # 20 tasks
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, store_url, f"proc-{n}", str(SLICES)],
            stderr=subprocess.PIPE, text=True,
        )
        for n in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    _check_all_done(store, export_ids)
    events = store.lease_events()
    _check_no_overlapping_leases(events, SLICES)
    assert len(events) == 20 * SLICES * 3  # claim, commit and an end per slice

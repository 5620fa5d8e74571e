"""A task's retry budget counts the failures since its last progress (issue 18), and the
worker decides with that count: a slice that committed a part before it failed is a first
failure, whatever the claimed record said.

The runner used to decide with the ``attempts`` of the record it claimed, which the
slice's own commits had since reset in the store. A PostgreSQL source restarted every few
parts then failed an export that kept moving (a CI run of tests/acceptance/test_restarts.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from egress.config import Settings
from egress.domain.jobs import ExportRecord, ExportState, TaskState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from egress.worker import runner as runner_module
from egress.worker.runner import TaskRunner
from jobsharness import make_events_db, write_home

PART_ROWS = 100
MAX_ATTEMPTS = 3


@pytest.fixture
def settings(tmp_path: Path, store_url: str) -> Settings:
    source = make_events_db(tmp_path / "source.db", {"events": 1000})
    return write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
                      worker={"slice_seconds": 30.0, "lease_seconds": 10.0,
                              "max_attempts": MAX_ATTEMPTS, "backoff_seconds": 0.01,
                              "backoff_max_seconds": 0.01})


@pytest.fixture
def store(settings: Settings):
    s = SqlJobStore(settings.store_url)
    s.migrate()
    yield s
    s.close()


class _Outage:
    """Sources whose reads fail with a connection error once ``reads_left`` reaches 0."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads_left = 0
        real_open = runner_module.export_source

        def opened(*args: object, **kwargs: object) -> object:
            source = real_open(*args, **kwargs)  # type: ignore[arg-type]
            real_read = source.read

            def read(*a: object, **k: object) -> object:
                if self.reads_left <= 0:
                    raise ConnectionError("the source went away")
                self.reads_left -= 1
                return real_read(*a, **k)  # type: ignore[arg-type]

            source.read = read  # type: ignore[method-assign]
            return source

        monkeypatch.setattr(runner_module, "export_source", opened)


def _slice(store: SqlJobStore, runner: TaskRunner) -> str:
    # the retry's short backoff must pass before the task can be claimed again
    for _ in range(200):
        claimed = store.task_claim("w1", lease_seconds=10, project_cap=10, limit=1)
        if claimed:
            return runner.run(claimed[0])
        threading.Event().wait(0.01)
    raise AssertionError("the task was never ready to claim again")


def _export_with_outage(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[_Outage, ExportRecord, TaskRunner]:
    """An export of ``events`` whose source reads fail on cue, and a runner for it."""
    outage = _Outage(monkeypatch)
    export, _ = create_export(store, settings, ExportRequest(
        source="main", tables=("events",), options={"part_rows": PART_ROWS}), project="p")
    return outage, export, TaskRunner(store, settings, threading.Event())


def test_a_failure_after_progress_is_retried_even_at_the_last_attempt(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    outage, export, runner = _export_with_outage(settings, store, monkeypatch)
    # two failures in a row, no progress: one attempt is left
    assert [_slice(store, runner) for _ in range(MAX_ATTEMPTS - 1)] == ["retry", "retry"]
    [task] = store.task_list(export.id)
    assert (task.attempts, task.rows) == (MAX_ATTEMPTS - 1, 0)
    # the last attempt commits parts, then the source goes away again: progress was made,
    # so this is the first failure of a new streak, not the one that fails the export
    outage.reads_left = 4
    assert _slice(store, runner) == "retry"
    [task] = store.task_list(export.id)
    assert task.state is TaskState.QUEUED and task.rows >= PART_ROWS
    assert task.attempts == 1 and task.failures == MAX_ATTEMPTS
    # the streak counts on from there: without progress, the cap fails the export
    assert _slice(store, runner) == "retry"
    assert _slice(store, runner) == "failed"
    failed = store.export_get("p", export.id)
    assert failed is not None and failed.state is ExportState.FAILED
    assert "table 'events'" in (failed.error or "")  # the cause itself is in the log


def test_the_export_completes_when_the_source_comes_back(
    settings: Settings, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    outage, export, runner = _export_with_outage(settings, store, monkeypatch)
    outcomes = []
    # each slice reads a little and fails: every failure follows progress, and the task
    # is never failed however many there are
    for _ in range(30):
        outage.reads_left = 3
        outcomes.append(_slice(store, runner))
        if outcomes[-1] != "retry":
            break
    assert outcomes[-1] == "done", outcomes
    assert outcomes.count("retry") >= MAX_ATTEMPTS, outcomes
    done = store.export_get("p", export.id)
    assert done is not None and done.state is ExportState.COMPLETED
    [task] = store.task_list(export.id)
    assert task.rows == 1000 and task.failures == outcomes.count("retry")

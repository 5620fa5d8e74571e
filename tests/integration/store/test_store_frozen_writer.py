"""A process frozen while it holds the SQLite store's write lock (SIGSTOP: a paused VM, a
debugger) does not stall the readers; a writer that has waited the bound kills a holder
that is stopped, or (``EGRESS_STORE_STOPPED_WRITER=wait``) gives up naming who holds the
lock and in what state, instead of hanging."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.exceptions import StoreError
from egress.store.sql import SqlJobStore


def _export(export_id: str) -> tuple[ExportRecord, list[TaskRecord]]:
    record = ExportRecord(id=export_id, project="p", source="main", tables=("t",),
                          format="csv", compression="none", destination="local",
                          state=ExportState.QUEUED)
    task = TaskRecord(id=f"tsk_{export_id[4:]}", export_id=export_id, project="p", table="t",
                      seq=0, state=TaskState.QUEUED)
    return record, [task]


@contextlib.contextmanager
def lock_holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that takes the store's write lock and keeps it; killed at the end."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from pathlib import Path; "
         "from egress.store.writelock import WriteLock; "
         f"lock = WriteLock(Path({str(tmp_path / 'store.db')!r} + '-writelock')); "
         "lock.__enter__(); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.send_signal(signal.SIGCONT)  # a no-op once it is reaped
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_frozen_lock_holder_blocks_no_reader_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlJobStore(url)
    store.migrate()
    store.export_create(*_export("exp_0001"))
    try:
        with lock_holder(tmp_path) as holder:
            os.kill(holder.pid, signal.SIGSTOP)
            started = time.monotonic()
            reader = SqlJobStore(url)
            try:
                reader.migrate()  # a current schema is checked without the write lock
                assert reader.export_get("p", "exp_0001") is not None
                assert reader.task_list("exp_0001")
            finally:
                reader.close()
            # a few milliseconds; a reader that waited for the frozen writer would wait
            # for ever
            assert time.monotonic() - started < 1.0

            monkeypatch.setenv("EGRESS_STORE_LOCK_SECONDS", "1")
            monkeypatch.setenv("EGRESS_STORE_STOPPED_WRITER", "wait")
            writer = SqlJobStore(url)
            try:
                started = time.monotonic()
                with pytest.raises(StoreError) as info:
                    writer.export_create(*_export("exp_0002"))
                assert 0.9 <= time.monotonic() - started < 5
            finally:
                writer.close()
            message = str(info.value)
            assert f"held by process {holder.pid} (t (stopped))" in message
            assert "PostgreSQL store" in message
        # once the holder is gone the kernel drops its lock: writes go through again
        store.export_create(*_export("exp_0003"))
    finally:
        store.close()


@pytest.mark.parametrize("pid_file", ["as written", "stale", "empty"])
def test_a_stopped_lock_holder_is_killed_by_a_writer_that_waited_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    pid_file: str,
) -> None:
    """The holder is found in the kernel's lock table: one stopped between taking the lock
    and writing its pid into the file (the previous holder's pid there, or nothing) is
    killed all the same."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlJobStore(url)
    store.migrate()
    try:
        with lock_holder(tmp_path) as holder:
            os.kill(holder.pid, signal.SIGSTOP)
            lock_file = tmp_path / "store.db-writelock"
            if pid_file != "as written":
                lock_file.write_text(f"{os.getpid()} 0.0\n" if pid_file == "stale" else "")
            monkeypatch.setenv("EGRESS_STORE_LOCK_SECONDS", "1")
            monkeypatch.delenv("EGRESS_STORE_STOPPED_WRITER", raising=False)
            caplog.set_level("ERROR", logger="egress.store.writelock")
            writer = SqlJobStore(url)
            try:
                writer.export_create(*_export("exp_0004"))  # once the holder is dead
            finally:
                writer.close()
            assert holder.wait(10) == -signal.SIGKILL
            assert any(f"killed process {holder.pid} (t (stopped))" in r.getMessage()
                       for r in caplog.records)
        assert store.export_get("p", "exp_0004") is not None
    finally:
        store.close()


def test_a_running_holder_is_never_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a stopped process is killed: a holder that is merely slow (running, sleeping,
    in a swap storm) is named when the wait ends, and lives on."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlJobStore(url)
    store.migrate()
    try:
        with lock_holder(tmp_path) as holder:
            monkeypatch.setenv("EGRESS_STORE_LOCK_SECONDS", "1")
            writer = SqlJobStore(url)
            try:
                with pytest.raises(StoreError,
                                   match=f"held by process {holder.pid} \\(s \\(sleeping"):
                    writer.export_create(*_export("exp_0005"))
            finally:
                writer.close()
            assert holder.poll() is None
    finally:
        store.close()

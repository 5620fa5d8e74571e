"""A process frozen while it holds the SQLite store's write lock (SIGSTOP: a paused VM, a
debugger) does not stall the readers, and a writer gives up after a bound with who holds
the lock and in what state, instead of hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def test_a_frozen_lock_holder_blocks_no_reader_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlJobStore(url)
    store.migrate()
    store.export_create(*_export("exp_0001"))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; "
         "from egress.store.writelock import WriteLock; "
         f"lock = WriteLock(Path({str(tmp_path / 'store.db')!r} + '-writelock')); "
         "lock.__enter__(); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)

        started = time.monotonic()
        reader = SqlJobStore(url)
        try:
            reader.migrate()  # a current schema is checked without the write lock
            assert reader.export_get("p", "exp_0001") is not None
            assert reader.task_list("exp_0001")
        finally:
            reader.close()
        # well under a second on a quiet machine; a reader that waited for the frozen
        # writer would wait for ever (the bound leaves room for a loaded CI machine)
        assert time.monotonic() - started < 3.0

        monkeypatch.setenv("EGRESS_STORE_LOCK_SECONDS", "1")
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
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
        store.close()
    # once the holder is gone the kernel drops its lock: writes go through again
    again = SqlJobStore(url)
    try:
        again.export_create(*_export("exp_0003"))
    finally:
        again.close()

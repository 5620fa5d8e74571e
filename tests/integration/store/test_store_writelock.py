"""SQLite store: egress processes queue for the write lock on a lock file (writelock.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from egress.store.sql import SqlJobStore
from egress.store.writelock import WriteLock


def test_sqlite_writes_wait_on_the_lock_file_and_go_as_soon_as_it_is_free(
        tmp_path: Path, export_request):
    db = tmp_path / "store.db"
    store = SqlJobStore(f"sqlite:///{db}")
    try:
        store.migrate()
        # another process's lock: its own open file, so the kernel treats it as one
        other = WriteLock(Path(f"{db}-writelock"))
        done: list[float] = []
        with other:
            writer = threading.Thread(
                target=lambda: (store.export_create(*export_request()),
                                done.append(time.monotonic())))
            writer.start()
            time.sleep(0.3)
            assert done == []  # the write waits for the lock file …
            assert store.export_count_active() == 0  # … and reads do not
            released = time.monotonic()
        writer.join(10)
        # … and goes when it is released, not after a busy-handler sleep
        assert done and done[0] - released < 0.1
        assert store.export_count_active() == 1
        other.close()
    finally:
        store.close()


def test_write_lock_is_reentrant_and_exclusive_between_threads(tmp_path: Path):
    lock = WriteLock(tmp_path / "x-writelock")
    order: list[str] = []
    with lock, lock:  # reentrant in one thread
        t = threading.Thread(target=lambda: (lock.__enter__(), order.append("other"),
                                             lock.__exit__(None, None, None)))
        t.start()
        time.sleep(0.1)
        order.append("first")
    t.join(5)
    assert order == ["first", "other"]
    lock.close()

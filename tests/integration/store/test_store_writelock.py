"""SQLite store: egress processes queue for the write lock on a lock file (writelock.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from egress.store.sql import SqlJobStore
from egress.store.writelock import WriteLock


def _queued_in_kernel(path: Path, within: float) -> bool:
    """True once /proc/locks shows a waiter ("->") blocked on ``path``'s flock."""
    inode = f":{path.stat().st_ino} "
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if any("->" in line and "FLOCK" in line and inode in line
               for line in Path("/proc/locks").read_text().splitlines()):
            return True
        time.sleep(0.02)
    return False


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
            # the write waits for the lock file in the kernel's queue (woken when the
            # holder lets go, not by a busy-handler sleep) …
            assert _queued_in_kernel(Path(f"{db}-writelock"), within=10)
            assert done == []
            assert store.export_count_active() == 0  # … and reads do not wait
        writer.join(10)
        assert done  # … and goes once the lock is released
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

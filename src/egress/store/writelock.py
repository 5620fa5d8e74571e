"""One writer at a time on a SQLite store, queued in the kernel instead of in SQLite's
busy handler.

SQLite lets one write transaction run at a time; a writer that finds the database
locked sleeps in the busy handler (1, 2, 5, 10 … up to 100 ms between tries) and so
waits on average far longer than the holder needs (a claim or a commit holds the lock
for about a millisecond). With worker processes writing beside the API that polling
was most of the API's create latency. Every egress process sharing the store takes an
exclusive ``flock`` on a file next to the database (``<database>-writelock``) around
its write transactions: a waiter sleeps in the kernel and wakes when the holder lets
go, in the order they came. Threads of one process queue on a lock first (one flock
per process is all the kernel sees). Writers that are not egress still meet SQLite's
own lock and busy handler. The kernel drops the lock of a process that dies.

Where ``fcntl`` is missing (Windows) only the threads of one process queue.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # not on Windows


class WriteLock:
    """Reentrant in one thread; exclusive across the threads and processes that use
    the same ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> WriteLock:
        self._threads.acquire()
        try:
            if self._depth == 0 and fcntl is not None:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)  # releases the GIL while it waits
            self._depth += 1
        except BaseException:
            self._threads.release()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and fcntl is not None and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        with self._threads:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

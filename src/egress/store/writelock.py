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

A process that is frozen while it holds the lock (a paused VM, SIGSTOP, a debugger) does
not die, so the wait is bounded (``EGRESS_STORE_LOCK_SECONDS``, 30 s by default): the
holder writes its pid and the time into the lock file, and a waiter that gives up says
who holds the lock, since when and in what state ("T (stopped)"). A holder that is
*stopped* (SIGSTOP, Ctrl-Z) when the bound is reached is killed instead
(``EGRESS_STORE_STOPPED_WRITER=kill``, the default; ``wait`` only names it): SQLite's own
write lock, which it holds too, cannot be taken from a live process, its leases have
ended by then (its work is forfeit and taken over by others), and a stopped process
cannot finish what it holds. Only a process the kernel's lock table shows holding this
very file is killed, never one a stale pid in the file names. Reads never take this
lock (SQLite's WAL lets them read while a writer writes). A waiter that finds the lock
taken waits in the kernel's queue on a helper thread, so that it can stop waiting.

Where ``fcntl`` is missing (Windows) only the threads of one process queue.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import TracebackType

from egress.exceptions import StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # not on Windows


log = logging.getLogger(__name__)

#: How long a writer waits for the lock before it gives up and says who holds it.
DEFAULT_WAIT_SECONDS = 30.0
#: What a waiter does with a holder that is stopped when the wait is over.
STOPPED_WRITER_POLICIES = ("kill", "wait")


def _wait_seconds() -> float:
    try:
        return float(os.environ.get("EGRESS_STORE_LOCK_SECONDS", DEFAULT_WAIT_SECONDS))
    except ValueError:
        return DEFAULT_WAIT_SECONDS


def _stopped_writer_policy() -> str:
    policy = os.environ.get("EGRESS_STORE_STOPPED_WRITER", "kill").strip().lower()
    return policy if policy in STOPPED_WRITER_POLICIES else "kill"


def flock_holders(path: Path) -> set[int]:
    """The pids the kernel's lock table shows holding a ``flock`` on ``path`` (waiters,
    the ``->`` lines, left out)."""
    try:
        st = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return set()
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where:
            holders.add(int(fields[4]))
    return holders


def _process_state(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split(":", 1)[1].strip().lower()
    except OSError:
        return "unknown"
    return "unknown"


class WriteLock:
    """Reentrant in one thread; exclusive across the threads and processes that use
    the same ``path``."""

    def __init__(self, path: Path, wait_seconds: float | None = None) -> None:
        self.path = path
        self.wait_seconds = _wait_seconds() if wait_seconds is None else wait_seconds
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> WriteLock:
        self._threads.acquire()
        try:
            if self._depth == 0 and fcntl is not None:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                self._acquire()
            self._depth += 1
        except BaseException:
            self._threads.release()
            raise
        return self

    def _acquire(self) -> None:
        """Take the flock: at once if it is free, else wait in the kernel's queue (the
        waiter wakes as soon as the holder lets go) on a helper thread, for at most
        ``wait_seconds``; the helper hands its own open file over when it gets the lock,
        or lets go of it at once if this thread stopped waiting."""
        assert self._fd is not None and fcntl is not None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            self._fd = self._wait_in_queue(self._fd)
        # who holds it, for a waiter that gives up (a frozen holder does not die)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()} {time.time():.3f}\n".encode(), 0)

    def _wait_in_queue(self, fd: int) -> int:
        handoff: dict[str, int | bool] = {}
        decided, got = threading.Lock(), threading.Event()
        locks = fcntl
        assert locks is not None

        def wait() -> None:
            mine = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                locks.flock(mine, locks.LOCK_EX)  # releases the GIL while it waits
            except OSError:
                os.close(mine)
                return
            with decided:
                if handoff.get("abandoned"):
                    locks.flock(mine, locks.LOCK_UN)
                    os.close(mine)
                    return
                handoff["fd"] = mine
            got.set()

        threading.Thread(target=wait, name="egress-store-lock", daemon=True).start()
        if not got.wait(self.wait_seconds) and not self._kill_stopped_holder(got):
            with decided:
                if "fd" not in handoff:
                    handoff["abandoned"] = True
                    raise StoreError(self._held_by())
        os.close(fd)  # the helper's open file holds the lock now
        return int(handoff["fd"])

    def _kill_stopped_holder(self, got: threading.Event) -> bool:
        """Kill the holder if it is a stopped process (see the module's notes) and wait
        for the lock once more; whether this thread got it.

        The holder is the one the kernel's lock table names, not the pid in the file: a
        process stopped between taking the lock and writing its pid there leaves the
        previous holder's pid (or nothing) in the file."""
        if _stopped_writer_policy() != "kill":
            return False
        stopped = {pid: state for pid in flock_holders(self.path) - {os.getpid()}
                   if (state := _process_state(pid)).startswith("t (stopped")}
        if not stopped:
            return False
        pid, state = next(iter(stopped.items()))
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:  # another user's process: name it instead
            log.warning("store write lock: cannot kill stopped holder pid=%d: %s", pid, exc)
            return False
        log.error(
            "store write lock: killed process %d (%s), stopped while it held the SQLite "
            "store's write lock (%s) for %s; its tasks are taken over when their leases "
            "end", pid, state, self.path, self._held_for(pid), extra={"holder_pid": pid},
        )
        return got.wait(self.wait_seconds)

    def _held_for(self, pid: int) -> str:
        try:
            pid_text, since_text = self.path.read_text().split()[:2]
            if int(pid_text) == pid:
                return f"{time.time() - float(since_text):.0f} s"
        except (OSError, ValueError):
            pass
        return "an unknown time"

    def _held_by(self) -> str:
        where = f"the SQLite job store's write lock ({self.path})"
        holders = sorted(flock_holders(self.path) - {os.getpid()})
        if not holders:
            return f"{where} is still held after {self.wait_seconds:.0f} s"
        pid = holders[0]
        return (f"{where} is held by process {pid} ({_process_state(pid)}) for "
                f"{self._held_for(pid)}; a frozen or stuck egress process blocks "
                "every writer of a SQLite store: resume or stop it (its tasks are taken "
                "over when their leases end), or use a PostgreSQL store for many workers")

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

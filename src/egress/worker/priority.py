"""A worker's CPU priority: beside the API on one machine, the workers yield the CPU."""

from __future__ import annotations

import contextlib
import logging
import os
import threading

log = logging.getLogger(__name__)


def lower_process_priority(nice: int) -> int | None:
    """``lower_priority`` for every thread the process has now (a worker process: some
    libraries start threads when they are imported) and those started later."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the calling thread, and what it starts
        tids = []
    for tid in tids:
        if tid != threading.get_native_id():
            with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
                if nice > os.getpriority(os.PRIO_PROCESS, tid):
                    os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
    return lower_priority(nice)


def lower_priority(nice: int) -> int | None:
    """Give the calling thread — and the threads it starts from now on, which inherit
    it — the CPU priority ``nice`` (Linux keeps a nice value per thread, so an embedded
    worker leaves the API's threads of its process alone). Only ever lowers the
    priority. Returns the thread's nice value, None where there is no such thing."""
    if not hasattr(os, "setpriority"):  # pragma: no cover - Windows
        return None
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
        now = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as exc:  # a sandbox that forbids it: run at the priority given
        log.warning("worker priority unchanged: %s", exc)
        return None
    log.info("worker priority", extra={"nice": now})
    return now

"""The worker process: N slots that claim and run slices, a reconciler, a webhook
dispatcher, graceful shutdown.

Workers are stateless: everything is in the store, and any worker continues any task.
On SIGTERM (or Ctrl-C) a worker stops claiming, lets each slot commit the part in hand,
releases its leases (so another worker takes over at once, not after expiry) and exits
within ``grace_seconds``; a second signal exits at once.

Every loop records the time of its iterations in ``Worker.health`` (worker/health.py):
what ``/healthz`` of ``egress worker --metrics-port`` answers from (worker/probes.py).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from types import FrameType
from typing import Any

from egress.config import Settings
from egress.logs import bound, in_context
from egress.metrics import CLAIM_SECONDS
from egress.store.base import WorkerStore
from egress.webhooks.dispatcher import Dispatcher
from egress.worker.health import Heartbeats
from egress.worker.reconciler import reconcile_once
from egress.worker.runner import TaskRunner

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        store: WorkerStore,
        settings: Settings,
        *,
        concurrency: int | None = None,
        name: str | None = None,
    ) -> None:
        self.store, self.settings = store, settings
        self.concurrency = concurrency or settings.worker.concurrency
        self.name = name or worker_name()
        self.stopping = threading.Event()
        self.runner = TaskRunner(store, settings, self.stopping, name=self.name)
        self.dispatcher = Dispatcher(store, settings, name=self.name)
        #: each loop's last iteration, for /healthz (worker/health.py, worker/probes.py)
        self.health = Heartbeats()
        self._signals = 0
        self._busy = 0
        self._lock = threading.Lock()
        # sources with a most-running-tasks setting: the claim enforces it fleet-wide
        limits = settings.source_task_limits()
        self._source_limits: dict[str, Any] = {"source_limits": limits} if limits else {}

    # --- signals ----------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now")
            os._exit(1)
        log.info("signal received: finishing the parts in hand", extra={"signal": signum})
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    # --- loops ------------------------------------------------------------------------

    def _slot(self) -> None:
        w = self.settings.worker
        me = threading.current_thread().name
        while not self.stopping.is_set():
            self.health.beat(me, allowance=w.poll_seconds * 2)  # the wait after a claim
            started = time.perf_counter()
            try:
                claimed = self.store.task_claim(
                    self.name, lease_seconds=w.lease_seconds, project_cap=w.project_cap,
                    limit=1, **self._source_limits)
            except Exception as exc:  # store away (restart, network): try again shortly
                CLAIM_SECONDS.labels("error").observe(time.perf_counter() - started)
                log.warning("claim failed", extra={"error": str(exc)})
                self.stopping.wait(w.poll_seconds * 2)
                continue
            claim_seconds = time.perf_counter() - started
            CLAIM_SECONDS.labels("claimed" if claimed else "empty").observe(claim_seconds)
            if not claimed:
                self.stopping.wait(w.poll_seconds)
                continue
            # alive while the slice keeps to its bounds (about slice_seconds)
            self.health.beat(me, allowance=w.slice_seconds)
            with self._lock:
                self._busy += 1
            task = claimed[0]
            try:
                with bound(export_id=task.export_id, task_id=task.id):
                    log.info("task claimed", extra={
                        "table": task.table, "attempts": task.attempts,
                        "claim_ms": round(claim_seconds * 1000, 2)})
                    self.runner.run(task)
            finally:
                with self._lock:
                    self._busy -= 1
        self.health.done(me)

    def _reconcile(self) -> None:
        while not self.stopping.wait(self.settings.worker.reconcile_seconds):
            self.health.beat("reconciler", allowance=self.settings.worker.reconcile_seconds)
            try:
                reconcile_once(self.store, self.settings, self.runner.remote)
            except Exception as exc:
                log.warning("reconcile failed", extra={"error": str(exc)})
        self.health.done("reconciler")

    def _poll_remote(self) -> None:
        """Poll the remote engines' submitted queries that are due (worker/remote.py)."""
        remote = self.runner.remote
        while not self.stopping.wait(self.settings.remote.poll_pass_seconds):
            self.health.beat("remote-poller", allowance=self.settings.remote.poll_pass_seconds)
            try:
                while remote.poll_pass() and not self.stopping.is_set():
                    self.health.beat("remote-poller",
                                     allowance=self.settings.remote.poll_pass_seconds)
            except Exception as exc:
                log.warning("remote poll pass failed", extra={"error": str(exc)})
        self.health.done("remote-poller")

    def _dispatch(self) -> None:
        """Send due webhooks; while some were due, look again at once."""
        while not self.stopping.wait(self.settings.webhooks.poll_seconds):
            self.health.beat("webhooks", allowance=self.settings.webhooks.poll_seconds)
            try:
                while self.dispatcher.run_once() and not self.stopping.is_set():
                    self.health.beat("webhooks", allowance=self.settings.webhooks.poll_seconds)
            except Exception as exc:
                log.warning("webhook dispatch failed", extra={"error": str(exc)})
        self.health.done("webhooks")
        self.dispatcher.close()

    def run(self, *, exit_when_idle: bool = False) -> int:
        """Run until a signal (or, with ``exit_when_idle``, until nothing is queued or
        running in any project). Returns the process exit code."""
        with bound(worker_id=self.name):
            return self._run(exit_when_idle)

    def _run(self, exit_when_idle: bool) -> int:
        slots = [
            threading.Thread(target=in_context(self._slot), name=f"slot-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        reconciler = threading.Thread(target=in_context(self._reconcile), name="reconciler",
                                      daemon=True)
        poller = threading.Thread(target=in_context(self._poll_remote), name="remote-poller",
                                  daemon=True)
        # Daemon: a send cut short by the exit is sent again when its lease ends.
        dispatcher = threading.Thread(target=in_context(self._dispatch), name="webhooks",
                                      daemon=True)
        # Watched from the start (a loop that never runs goes stale). Each beat allows
        # the loop's own wait until its next iteration on top of the bound.
        waits = {reconciler.name: self.settings.worker.reconcile_seconds,
                 poller.name: self.settings.remote.poll_pass_seconds,
                 dispatcher.name: self.settings.webhooks.poll_seconds}
        for t in (*slots, reconciler, poller, dispatcher):
            self.health.beat(t.name, allowance=waits.get(t.name, 0.0))
            t.start()
        # Said once its threads run (start() returns when a thread is up): whoever waits
        # for this line finds the whole worker, not its first thread alone.
        log.info("worker started", extra={"worker": self.name, "concurrency": self.concurrency})
        poll = self.settings.worker.poll_seconds
        try:
            self.health.beat("main", allowance=poll)
            # checked before the first wait too: on an empty queue a batch worker exits at
            # once (queued exports count as active: it never leaves work unclaimed)
            while not (exit_when_idle and self._idle()):
                if self.stopping.wait(poll):
                    break
                self.health.beat("main", allowance=poll)
            self.stopping.set()
        except KeyboardInterrupt:
            self.stopping.set()
        self.health.done("main")
        deadline = time.monotonic() + self.settings.worker.grace_seconds
        # The helpers too: none may still hold a store connection when the caller closes it.
        for t in (*slots, reconciler, poller, dispatcher):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        # snapshot sessions end (and their exports fail) before the store is closed
        self.runner.snapshots.close(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in slots):
            log.warning("grace period over with slices still running; their leases will expire")
            return 1
        log.info("worker stopped", extra={"worker": self.name})
        return 0

    def _idle(self) -> bool:
        with self._lock:
            if self._busy:
                return False
        try:
            if self.store.export_count_active() == 0:
                # The events of the exports that just ended go out before the exit.
                while self.dispatcher.run_once():
                    pass
                return True
            # Work left elsewhere: other workers' tasks, or leases of dead workers, which
            # the reconciler thread requeues every reconcile_seconds. (A reconcile pass on
            # every idle poll here cost a fleet draining tiny exports ~10 % of its CPU.)
        except Exception as exc:
            log.warning("idle check failed", extra={"error": str(exc)})
        return False

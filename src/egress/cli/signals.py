"""Graceful stop for long-running commands.

The first Ctrl-C (SIGINT) or a SIGTERM asks the work to stop after the part in hand:
``should_stop()`` turns true, the engine commits that part and returns. A second Ctrl-C
quits at once with ``os._exit``: that is safe because every commit is atomic (a part
that was being written is simply written again on resume).

Signal handlers run in the main thread between bytecodes, possibly while Rich or a
buffered stream holds a lock; so they only set flags and write with ``os.write``.

The work itself runs in a worker thread (:func:`run_in_thread`): the main thread only
waits, so a handler runs at once even while the work is inside a long C call, and ADBC
drivers, which take SIGINT over during their calls *on the main thread* (to cancel the
query, which the SQLite driver answers with NOT_IMPLEMENTED), leave it alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, TypeVar

from egress.cli.errors import exit_code_for_signal

T = TypeVar("T")

_SHOW_CURSOR = b"\x1b[?25h"


def write_stderr(text: str) -> None:
    """Write straight to file descriptor 2: safe inside a signal handler."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            written = os.write(2, data)
        except OSError:
            return
        data = data[written:]


class GracefulStop:
    """A ``should_stop`` callable that installs SIGINT/SIGTERM handlers while entered."""

    def __init__(
        self,
        on_stopping: Callable[[int], None] | None = None,
        on_abort: Callable[[], str] | None = None,
    ) -> None:
        #: Called (from the handler) on the first signal with its number.
        self._on_stopping = on_stopping
        #: Returns the text printed when a second Ctrl-C quits at once.
        self._on_abort = on_abort
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __call__(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> GracefulStop:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            if self._on_stopping is not None:
                self._on_stopping(signum)
            return
        if signum == signal.SIGINT:
            # Second Ctrl-C: quit now. The terminal gets its cursor back (Rich hides it).
            if sys.stderr is not None and sys.stderr.isatty():
                os.write(2, _SHOW_CURSOR)
            write_stderr(self._on_abort() if self._on_abort else "\negress: stopped at once\n")
            os._exit(exit_code_for_signal(signum))
        # A repeated SIGTERM keeps stopping gracefully: service managers resend it.


def run_in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread while the main thread waits (and handles signals)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the main thread, raised there
            box["error"] = exc

    # daemon: a second Ctrl-C's os._exit must not wait for it
    worker = threading.Thread(target=target, name="egress-work", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
    if "error" in box:
        raise box["error"]
    return box["result"]

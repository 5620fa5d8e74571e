"""Every log record of every logger, formatted as the server writes it (extra fields too):
for tests that scan what egress logs for secrets."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from egress.logs import QUIET_LIBRARIES, JsonFormatter, KeyValueFormatter


class LogCapture(logging.Handler):
    """Records every record at DEBUG; ``skip_thread`` (e.g. the test's HTTP client thread)
    is left out when only the server's side is to be checked."""

    def __init__(self, skip_thread: int | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(KeyValueFormatter())
        # both forms the CLI writes: a secret must be masked in each
        self.json = JsonFormatter()
        self.lines: list[str] = []
        self.skip_thread = skip_thread

    def emit(self, record: logging.LogRecord) -> None:
        if self.skip_thread is None or record.thread != self.skip_thread:
            self.lines.append(self.format(record))
            self.lines.append(self.json.format(record))


@contextlib.contextmanager
def capturing_logs(skip_thread: int | None = None) -> Iterator[LogCapture]:
    """The root logger at DEBUG into a :class:`LogCapture`, restored afterwards."""
    root = logging.getLogger()
    handler, level = LogCapture(skip_thread), root.level
    # an earlier in-process CLI run may have quietened the libraries (egress.logs)
    quiet = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.NOTSET)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for name, was in quiet.items():
            logging.getLogger(name).setLevel(was)

"""Which progress display a command shows: Rich bars on a terminal, plain lines on a pipe
or a file (cron, CI, a log), or none. ``egress export`` and ``egress jobs wait`` show the
same ones (egress.cli.progress_bars, progress_lines), each imported only when chosen."""

from __future__ import annotations

import sys
from typing import Any

PROGRESS_MODES = ("auto", "bar", "lines", "none")


def make_display(mode: str, interval: float = 10.0) -> Any:
    """The display for ``mode`` (one of PROGRESS_MODES; auto: bars on a terminal, else
    lines), or None; ``interval``: seconds between two plain lines of a table."""
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "lines"
    if mode == "bar":
        from egress.cli.progress_bars import ExportProgress

        return ExportProgress()
    if mode == "lines":
        from egress.cli.progress_lines import ProgressLines

        return ProgressLines(interval=interval)
    return None

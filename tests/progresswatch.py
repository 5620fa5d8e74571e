"""Watching a child export's progress from a test, cheaply.

Kill tests poll a child's state file or log every few milliseconds to pick their moment.
Parsing the whole file on every poll took the CPU that the child (on a loaded two-core
CI machine, beside two other groups of tests) needed: about 0.4 ms a poll for a 30 KB
state file, over 2,500 polls a test. These read a file again only when it changed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path


class StateRows:
    """Rows committed in an output directory's ``.egress/state.json`` (-1: none yet)."""

    def __init__(self, out: Path) -> None:
        self._path = out / ".egress" / "state.json"
        self._seen: tuple[int, ...] | None = None
        self._rows = -1

    def __call__(self) -> int:
        try:
            with open(self._path, "rb") as f:
                # egress replaces the file by a rename: a new inode each time
                st = os.fstat(f.fileno())
                seen = (st.st_ino, st.st_size, st.st_mtime_ns)
                if seen != self._seen:
                    state = json.loads(f.read())
                    self._seen = seen
                    self._rows = sum(t["checkpoint"]["rows"] for t in state["tasks"].values())
        except FileNotFoundError:  # not written yet (or removed at the end)
            self._seen, self._rows = None, -1
        return self._rows


class MatchingLines:
    """Lines of an append-only log that match ``pattern``, counted as the log grows."""

    def __init__(self, path: Path, pattern: re.Pattern[str]) -> None:
        self._path, self._pattern = path, pattern
        self._offset = 0
        self._count = 0

    def __call__(self) -> int:
        try:
            with open(self._path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # a new log: count again
                    self._offset = self._count = 0
                f.seek(self._offset)
                new = f.read()
        except FileNotFoundError:
            return self._count
        end = new.rfind(b"\n") + 1  # a line still being written is read once it ends
        self._offset += end
        self._count += sum(1 for line in new[:end].decode().splitlines()
                           if self._pattern.match(line))
        return self._count

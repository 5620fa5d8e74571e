"""The local sink's staged copies: one per writer, so that a zombie's write lands in no
one else's bytes.

A file being written lives in ``ROOT/.egress/staging/`` as ``<name>~<file id>~<holder>``.
The holder is a writer — one sink object: one slice under one lease, or one one-shot
run. A writer writes only into its own copy, so a writer that lost its lease and wakes
(SIGSTOP, a paused VM) between the store's fence check and its ``pwrite`` writes into a
file that no commit refers to and that nobody else reads past its committed bytes.

- A slice that ends cleanly (every part it stored is committed) **seals** its copy:
  renames it ``<name>~<id>~at-<size>``. The next writer **adopts** a sealed copy whose
  size is the committed size by renaming it to its own name: no byte is copied, which is
  the normal path from one slice to the next.
- A writer that finds no such copy (the writer before it was killed or frozen) **copies**
  the committed bytes from a copy that holds them into its own, checked against the
  checkpoint's CRC32C (a zombie's copy may hold bytes it never committed): one read of
  the file so far, only after a takeover.
- Completing renames the completer's copy to the final name and removes every other
  copy of the file: a zombie that wakes later finds its copy gone and writes nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import google_crc32c

from egress.domain.checkpoint import PartRecord
from egress.domain.crc import crc32c_combine
from egress.exceptions import SinkError

#: The holder of a copy no writer holds: its bytes are all committed.
SEALED = "at-"
_COPY_CHUNK = 8 * 1024 * 1024


def new_file_id() -> str:
    return secrets.token_hex(8)


class StagedCopies:
    """The copies of the files one writer writes, under ``staging``."""

    def __init__(self, staging: Path, *, fsync: bool) -> None:
        self.staging, self.fsync = staging, fsync
        self.writer = secrets.token_hex(6)
        #: name → the copy this writer holds
        self._held: dict[str, Path] = {}
        #: name → {committed size: CRC32C of the bytes up to it}, from the checkpoint
        self._committed: dict[str, dict[int, int]] = {}

    def _prefix(self, name: str, state: dict[str, Any]) -> str:
        return f"{name.replace('/', '__')}~{state['id']}~"

    def _path(self, name: str, state: dict[str, Any], holder: str) -> Path:
        return self.staging / (self._prefix(name, state) + holder)

    def copies(self, name: str, state: dict[str, Any]) -> list[Path]:
        """Every staged copy of the file (this writer's, sealed ones, other writers')."""
        prefix = self._prefix(name, state)
        try:
            return sorted(self.staging / n for n in os.listdir(self.staging)
                          if n.startswith(prefix))
        except FileNotFoundError:
            return []

    def remember(self, name: str, parts: Sequence[PartRecord]) -> None:
        """Note the committed sizes of the file and their CRC32Cs (what a copy must hold)."""
        ends, end, crc = {0: 0}, 0, 0
        for p in parts:
            crc, end = crc32c_combine(crc, p.crc32c, p.size), end + p.size
            ends[end] = crc
        self._committed[name] = ends

    def held_bytes(self, name: str, state: dict[str, Any]) -> int | None:
        """The most bytes any copy holds; None when there is no copy."""
        sizes = []
        for path in self.copies(name, state):
            with contextlib.suppress(FileNotFoundError):
                sizes.append(path.stat().st_size)
        return max(sizes) if sizes else None

    def target(self, name: str, state: dict[str, Any], offset: int) -> Path:
        """This writer's copy, to write at ``offset`` (the committed size when it is taken:
        created, adopted or copied on the first write of a slice)."""
        path = self._held.get(name)
        if path is None:
            path = self._held[name] = self._take(name, state, offset)
        return path

    def mine(self, name: str) -> Path | None:
        return self._held.get(name)

    def drop(self, name: str) -> None:
        self._held.pop(name, None)

    def _take(self, name: str, state: dict[str, Any], offset: int) -> Path:
        mine = self._path(name, state, self.writer)
        if offset == 0:
            # no mkdir: a finished export's staging area is not made again by a late writer
            os.close(os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return mine
        with contextlib.suppress(FileNotFoundError):  # another writer adopted it first
            os.rename(self._path(name, state, f"{SEALED}{offset}"), mine)
            return mine
        self._copy_committed(name, state, offset, mine)
        return mine

    def _copy_committed(self, name: str, state: dict[str, Any], offset: int,
                        mine: Path) -> None:
        expected = self._committed.get(name, {}).get(offset)
        if expected is None:
            raise SinkError(f"no record of the {offset} committed bytes of {name!r} to take "
                            "its staged copy over")
        candidates = []
        for path in self.copies(name, state):
            with contextlib.suppress(FileNotFoundError):
                if path != mine and path.stat().st_size >= offset:
                    candidates.append(path)
        fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for source in candidates:
                if _copy_prefix(source, fd, offset) == expected:
                    if self.fsync:
                        os.fsync(fd)
                    return
                os.ftruncate(fd, 0)  # bytes its writer never committed: not these
        finally:
            os.close(fd)
        mine.unlink(missing_ok=True)
        raise SinkError(f"no staged copy of {name!r} holds its {offset} committed bytes "
                        f"(in {self.staging}); it was changed outside egress")

    def seal(self) -> None:
        """After a clean slice: every copy held holds committed bytes only; leave each for
        the next writer under its size (never replacing a copy already sealed there)."""
        held, self._held = self._held, {}
        for path in held.values():
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue  # completed (or removed by a finisher)
            sealed = path.with_name(path.name.rsplit("~", 1)[0] + f"~{SEALED}{size}")
            if sealed.exists():  # the same committed bytes, sealed by a writer before
                path.unlink(missing_ok=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, sealed)

    def remove_others(self, name: str, state: dict[str, Any], keep: Path | None) -> None:
        for path in self.copies(name, state):
            if path != keep:
                path.unlink(missing_ok=True)


def _copy_prefix(source: Path, fd: int, size: int) -> int:
    """Copy the first ``size`` bytes of ``source`` to ``fd`` from offset 0; their CRC32C."""
    crc, done = 0, 0
    with open(source, "rb") as f:
        while done < size:
            chunk = f.read(min(_COPY_CHUNK, size - done))
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                written = os.pwrite(fd, view, done)
                view, done = view[written:], done + written
            crc = google_crc32c.extend(crc, chunk)
    return crc if done == size else -1

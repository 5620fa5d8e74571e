"""Running SHA-256 digests of files being uploaded part by part, kept per process.

hashlib's state cannot be saved in a checkpoint, so a digest lives in this process's
memory, keyed by the upload, and carries over from one slice (and sink object) to the
next as long as the parts arrive in order. A file whose earlier parts another process
uploaded (a resume after a crash, a task continued by another worker) or whose parts were
rewritten has no running digest: the sink reads the finished object back to hash it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Uploads followed at once; the oldest is forgotten beyond (it is read back if needed).
MAX_TRACKED = 512


@dataclass
class _Running:
    size: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)


class RunningDigests:
    def __init__(self) -> None:
        self._digests: OrderedDict[tuple[str, ...], _Running] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, upload: tuple[str, ...], offset: int, data: bytes) -> None:
        """Extend ``upload``'s digest with a part stored at ``offset``; a part anywhere but
        right after the hashed bytes (a rewrite, a resume) drops it."""
        with self._lock:
            running = self._digests.get(upload)
            if offset == 0:
                running = self._digests[upload] = _Running()
            elif running is None or running.size != offset:
                self._digests.pop(upload, None)
                return
            self._digests.move_to_end(upload)
            while len(self._digests) > MAX_TRACKED:
                self._digests.popitem(last=False)
            running.size += len(data)
            # hashed under the lock: parts of one upload are committed one at a time
            running.hasher.update(data)

    def take(self, upload: tuple[str, ...], size: int) -> str | None:
        """The hex SHA-256 of ``upload`` if its running digest covers exactly ``size``
        bytes; forgets it either way."""
        with self._lock:
            running = self._digests.pop(upload, None)
        return running.hasher.hexdigest() if running and running.size == size else None


def sha256_of(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()

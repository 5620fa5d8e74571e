"""A seekable file over one S3 object, read by ranged GETs (a Parquet footer is read
without the data before it)."""

from __future__ import annotations

import io
from collections.abc import Collection
from typing import Any, Protocol


class ObjectRequests(Protocol):
    """What the reader uses of ``S3Sink`` (sinks/s3.py): its retried requests."""

    def _call(self, op: str, key: str, *, expect: Collection[str] = (),
              **kwargs: Any) -> Any: ...


class RangedReader(io.RawIOBase):
    """A read-only, seekable file over one object, read by ranged GETs."""

    def __init__(self, sink: ObjectRequests, key: str, size: int) -> None:
        self._sink, self._key, self._size, self._pos = sink, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + len(view))
        if end <= self._pos:
            return 0
        resp = self._sink._call("get_object", self._key, Key=self._key,
                                Range=f"bytes={self._pos}-{end - 1}")
        data = resp["Body"].read()
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

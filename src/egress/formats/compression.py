"""Per-part compression: gzip members and zstd frames concatenate into one valid stream.

Both are deterministic: gzip with mtime 0 and a fixed level, zstd with a fixed level and
no content checksum surprises, so a resumed run writes the same bytes.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Protocol

import zstandard

from egress.exceptions import UnknownNameError


class Compression(Protocol):
    # read-only (the codecs are frozen dataclasses)
    @property
    def name(self) -> str: ...
    @property
    def suffix(self) -> str: ...

    def compress(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class NoCompression:
    name: str = "none"
    suffix: str = ""

    def compress(self, data: bytes) -> bytes:
        return data


@dataclass(frozen=True)
class Gzip:
    level: int = 6
    name: str = "gzip"
    suffix: str = ".gz"

    def compress(self, data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=self.level, mtime=0)


@dataclass(frozen=True)
class Zstd:
    level: int = 3
    name: str = "zstd"
    suffix: str = ".zst"

    def compress(self, data: bytes) -> bytes:
        return zstandard.ZstdCompressor(level=self.level, write_checksum=True).compress(data)


COMPRESSIONS: dict[str, Compression] = {c.name: c for c in (NoCompression(), Gzip(), Zstd())}


def get_compression(name: str) -> Compression:
    try:
        return COMPRESSIONS[name]
    except KeyError:
        raise UnknownNameError("compression", name, COMPRESSIONS) from None

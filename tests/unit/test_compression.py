"""Per-part compression: deterministic, and parts concatenate into one valid stream."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess

import pytest
import zstandard

from egress.exceptions import UnknownNameError
from egress.formats.compression import COMPRESSIONS, get_compression

PIECES = [b"header\n", b"", b"x" * 100_000, bytes(range(256)) * 10, b"last\n"]


def read_all(name: str, data: bytes) -> bytes:
    if name == "gzip":
        return gzip.decompress(data)
    if name == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                           read_across_frames=True)
        return reader.read()
    return data


@pytest.mark.parametrize("name", sorted(COMPRESSIONS))
def test_members_concatenate_into_one_stream(name: str) -> None:
    c = get_compression(name)
    data = b"".join(c.compress(p) for p in PIECES)
    assert read_all(name, data) == b"".join(PIECES)
    tool = {"gzip": "gzip", "zstd": "zstd"}.get(name)
    if tool and shutil.which(tool):
        out = subprocess.run([tool, "-dc"], input=data, capture_output=True, check=True).stdout
        assert out == b"".join(PIECES)


@pytest.mark.parametrize("name", ["gzip", "zstd"])
def test_empty_input_is_a_valid_stream(name: str) -> None:
    data = get_compression(name).compress(b"")
    assert data and read_all(name, data) == b""


@pytest.mark.parametrize("name", sorted(COMPRESSIONS))
def test_deterministic(name: str) -> None:
    c = get_compression(name)
    assert c.compress(b"abc" * 1000) == c.compress(b"abc" * 1000)


def test_gzip_header_has_no_clock() -> None:
    data = get_compression("gzip").compress(b"abc")
    assert data[4:8] == b"\0\0\0\0"  # MTIME
    assert data[3] == 0  # FLG: no file name, no comment


def test_suffixes() -> None:
    assert [get_compression(n).suffix for n in ("none", "gzip", "zstd")] == ["", ".gz", ".zst"]


def test_unknown_name_lists_the_known_ones() -> None:
    known = "unknown compression 'lz4'; known: gzip, none, zstd"
    with pytest.raises(UnknownNameError, match=known):
        get_compression("lz4")

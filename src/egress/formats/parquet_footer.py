"""Parquet footers built from the row groups of separately encoded parts.

A Parquet file is ``PAR1``, row groups, then a footer (Thrift ``FileMetaData``) that
says where each row group's pages start. egress encodes each part as a small file of
its own with pyarrow and keeps only its row groups' bytes, which do not depend on where
they land (pages hold no file offsets): the offsets live in the footer alone. So a part
can be written, committed and forgotten; its row-group metadata, moved to the part's
offset in the real file, is kept in the checkpoint; and the file's footer is those
metadata put together, whichever process writes it. pyarrow can neither write a row
group at an offset nor edit a footer, hence Thrift (thriftpy2 and parquet-format's IDL,
``parquet.thrift``, vendored unchanged).
"""

from __future__ import annotations

import contextlib
import copy
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

MAGIC = b"PAR1"
_TAIL = struct.Struct("<i")  # footer length, then MAGIC


_THRIFT_LOCK = threading.Lock()
#: preload's own: a second format made while Thrift loads must not wait for the load
_PRELOAD_LOCK = threading.Lock()


_loaded: Any = None


def _thrift() -> Any:
    """The IDL's module; importing thriftpy2 (urllib, ply…) and parsing the IDL (ply
    builds its tables in every process) take ~0.15 s, so it is loaded once, on first use
    or by preload's thread. Every use of thriftpy2 goes through here first: two threads
    importing thriftpy2's modules at once can trip Python's import deadlock detection
    (_DeadlockError in thriftpy2.transport), so the imports happen under the lock only."""
    global _loaded
    if _loaded is None:
        with _THRIFT_LOCK:
            if _loaded is None:
                import thriftpy2
                import thriftpy2.protocol
                import thriftpy2.utils

                _loaded = thriftpy2.load(str(Path(__file__).with_name("parquet.thrift")),
                                         module_name="egress_parquet_thrift")
    return _loaded


_preloading: threading.Thread | None = None


def _after_fork() -> None:
    # a child forked while the parent's thread held the lock would wait for it forever
    global _THRIFT_LOCK, _PRELOAD_LOCK, _preloading
    _THRIFT_LOCK, _PRELOAD_LOCK, _preloading = threading.Lock(), threading.Lock(), None


os.register_at_fork(after_in_child=_after_fork)


def preload() -> None:
    """Load Thrift and the IDL on a thread of its own (once per process), while the
    export connects, plans and reads its first rows: the first part's footer need not
    wait for it. A failure is left for the encoder's own call to raise."""
    global _preloading
    with _PRELOAD_LOCK:
        if _preloading is not None:
            return

        def load() -> None:
            with contextlib.suppress(Exception):  # raised again where a footer is needed
                _thrift()

        _preloading = threading.Thread(target=load, name="egress-thrift-preload",
                                       daemon=True)
    _preloading.start()


def _protocol() -> Any:
    _thrift()  # thriftpy2 imported under the lock first (see there)
    from thriftpy2.protocol import TCompactProtocolFactory

    return TCompactProtocolFactory()


def _decode(data: bytes) -> Any:
    module = _thrift()
    from thriftpy2.utils import deserialize

    return deserialize(module.FileMetaData(), data, _protocol())


def _encode(meta: Any) -> bytes:
    _thrift()
    from thriftpy2.utils import serialize

    return bytes(serialize(meta, _protocol()))


class CollectedFile:
    """A file object that pyarrow writes a Parquet file into, kept as the pieces written:
    ``split`` joins the row groups' bytes once (no growing buffer to copy as it grows,
    no second copy to cut the magic and footer off: a part's bytes are a large share
    of an export's memory)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        self._pieces.append(bytes(data))
        self._size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def split(self) -> tuple[bytes, bytes]:
        """The row groups' bytes and the footer (Thrift bytes) of the file written."""
        head = b"".join(self._pieces[:4])[:4]
        tail = b"".join(self._pieces[-3:])[-8:]
        if self._size < 12 or head != MAGIC or tail[4:] != MAGIC:
            raise ValueError("not a whole Parquet file")
        (length,) = _TAIL.unpack(tail[:4])
        start, end = len(MAGIC), self._size - 8 - length
        body: list[bytes] = []
        footer: list[bytes] = []
        at = 0
        for piece in self._pieces:
            # the parts of this piece that fall in [start, end) and in [end, end + length)
            for lo, hi, into in ((start, end, body), (end, end + length, footer)):
                a, b = max(lo, at), min(hi, at + len(piece))
                if a < b:
                    into.append(piece if (a, b) == (at, at + len(piece))
                                else piece[a - at : b - at])
            at += len(piece)
        self._pieces = []
        return b"".join(body), b"".join(footer)


#: Footers decoded in this process (Thrift's compact protocol is parsed in Python: ~7 ms
#: a part's footer), so that putting a file's footer together, in the planning dry run
#: and in the commit, decodes none of the parts this process encoded.
_DECODED: OrderedDict[bytes, Any] = OrderedDict()
_DECODED_MAX = 4096
_LOCK = threading.Lock()


def _remember(footer: bytes, meta: Any) -> None:
    with _LOCK:
        _DECODED[footer] = meta
        _DECODED.move_to_end(footer)
        while len(_DECODED) > _DECODED_MAX:
            _DECODED.popitem(last=False)


def _decoded(footer: bytes) -> Any:
    """``footer`` decoded; shared: never to be changed."""
    with _LOCK:
        meta = _DECODED.get(footer)
    if meta is None:
        meta = _decode(footer)
        _remember(footer, meta)
    return meta


def moved(footer: bytes, delta: int) -> bytes:
    """``footer`` with every file offset of its row groups moved by ``delta`` bytes."""
    meta = _decode(footer)
    for group in meta.row_groups or ():
        if group.file_offset is not None:
            group.file_offset += delta
        for chunk in group.columns:
            if chunk.file_offset:
                chunk.file_offset += delta
            cm = chunk.meta_data
            cm.data_page_offset += delta
            for name in ("dictionary_page_offset", "index_page_offset",
                         "bloom_filter_offset"):
                if getattr(cm, name) is not None:
                    setattr(cm, name, getattr(cm, name) + delta)
            # page indexes are not written (write_page_index=False): nothing to move
            if chunk.offset_index_offset is not None or chunk.column_index_offset is not None:
                raise ValueError("cannot move a Parquet footer that has page indexes")
    out = _encode(meta)
    _remember(out, meta)
    return out


def merged(footers: Sequence[bytes]) -> bytes:
    """One footer with the row groups of ``footers``, in order (their offsets are
    already where the groups are in the file); the schema and key-value metadata are
    the first one's (every part of a file has the same)."""
    if not footers:
        raise ValueError("no footers to merge")
    return _merged(tuple(footers))


@lru_cache(maxsize=2)  # the planning dry run and the commit ask for the same footer
def _merged(footers: tuple[bytes, ...]) -> bytes:
    metas = [_decoded(f) for f in footers]
    groups = [g for m in metas for g in m.row_groups or ()]
    for ordinal, group in enumerate(groups):
        if group.ordinal is not None:  # a row group's place in its file (the same
            group.ordinal = ordinal  # in every file footer it is part of)
    result = copy.copy(metas[0])
    result.row_groups, result.num_rows = groups, sum(m.num_rows for m in metas)
    return _encode(result)


def file_tail(footer: bytes) -> bytes:
    """What ends a file whose footer is ``footer``."""
    return footer + _TAIL.pack(len(footer)) + MAGIC

"""The plan of a task and its checkpoint: plain values that serialise to JSON.

A :class:`TaskSpec` is fixed when the task is planned and never changes: everything
that decides where parts end (rows per part, minimum part bytes, maximum file size) is
in it, so a resumed run cuts the output exactly where an uninterrupted run would.

A :class:`Checkpoint` is the progress of one task after its last committed part. It is
replaced, never mutated: ``run_slice`` returns a new one after each commit.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from egress.domain.keys import Key, decode_key, encode_key
from egress.domain.predicate import Predicate
from egress.domain.ranges import KeyRange

CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class TaskSpec:
    """What one task exports and how its output is cut into parts and files."""

    table: str
    format: str
    compression: str
    part_rows: int
    base_name: str
    format_options: dict[str, Any] = field(default_factory=dict)
    #: A part grows past ``part_rows`` until it holds this many bytes (S3: 5 MiB).
    min_part_bytes: int = 0
    #: Start a new numbered file once a file holds at least this many bytes.
    max_file_size: int | None = None
    #: The output columns, in this order (None: every column of the table).
    columns: tuple[str, ...] | None = None
    #: Only rows matching it are exported (None: every row).
    predicate: Predicate | None = None
    #: A range task of a split table: only rows of this key range (None: the whole table).
    key_range: KeyRange | None = None
    #: A range of a stitched split (``split_files: false``): the table's row index where
    #: this range starts (its encoders continue the file from there: no header, JSON
    #: separators, SQL statements as the single task writes them). None: not stitched.
    stitch_rows_before: int | None = None
    #: The stitched file's final name (the range writes a piece under a hidden name;
    #: the export's finalize joins the pieces in key order: engine/stitch.py).
    stitch_name: str | None = None

    @property
    def stitched(self) -> bool:
        return self.stitch_rows_before is not None

    @property
    def read_predicate(self) -> Predicate | None:
        """What the source is asked to filter on: the predicate and the key range."""
        if self.key_range is None:
            return self.predicate
        conditions = self.predicate.conditions if self.predicate is not None else ()
        return Predicate(conditions, key_range=self.key_range)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["columns"] = list(self.columns) if self.columns is not None else None
        data["predicate"] = self.predicate.to_json() if self.predicate is not None else None
        if self.key_range is None:
            del data["key_range"]  # specs of unsplit tasks stay as they were
        else:
            data["key_range"] = self.key_range.to_json()
        if self.stitch_rows_before is None:
            del data["stitch_rows_before"], data["stitch_name"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskSpec:
        data = dict(data)
        if data.get("columns") is not None:
            data["columns"] = tuple(data["columns"])
        data["predicate"] = Predicate.from_json(data.get("predicate"))
        data["key_range"] = KeyRange.from_json(data.get("key_range"))
        return cls(**data)


@dataclass(frozen=True)
class PartRecord:
    """A committed part of an output file."""

    number: int
    rows: int
    size: int
    crc32c: int
    #: What the sink said about the stored part (an S3 ETag); None for local files.
    etag: str | None = None
    #: Key of the part's last row: where reading resumes when a file is rewound to here.
    last_key: Key | None = None
    #: What the file's footer needs of this part (Parquet: its row groups' metadata).
    metas: tuple[bytes, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict: that deep-copies the metas first, and every
        # commit writes every part of the open file (a Parquet file has hundreds)
        data: dict[str, Any] = {
            "number": self.number, "rows": self.rows, "size": self.size,
            "crc32c": self.crc32c, "etag": self.etag, "last_key": encode_key(self.last_key),
        }
        if self.metas:
            data["metas"] = [base64.b64encode(m).decode() for m in self.metas]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartRecord:
        data = dict(data)
        data["last_key"] = decode_key(data.get("last_key"))
        data["metas"] = tuple(base64.b64decode(m) for m in data.get("metas", ()))
        return cls(**data)


@dataclass(frozen=True)
class OpenFile:
    """The output file that parts are being appended to."""

    index: int
    name: str
    parts: tuple[PartRecord, ...] = ()
    rows: int = 0
    size: int = 0
    crc32c: int = 0
    first_key: Key | None = None
    #: Opaque state of the sink for this file (an S3 upload id), persisted with the checkpoint.
    sink_state: dict[str, Any] = field(default_factory=dict)
    #: The footer is stored: only making the file final is left.
    closed: bool = False
    #: The table is exhausted: once this file is final the task is done.
    last: bool = False

    @property
    def next_part_number(self) -> int:
        return len(self.parts) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "parts": [p.to_json() for p in self.parts],
            "rows": self.rows,
            "size": self.size,
            "crc32c": self.crc32c,
            "first_key": encode_key(self.first_key),
            "sink_state": self.sink_state,
            "closed": self.closed,
            "last": self.last,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpenFile:
        return cls(
            index=data["index"],
            name=data["name"],
            parts=tuple(PartRecord.from_json(p) for p in data["parts"]),
            rows=data["rows"],
            size=data["size"],
            crc32c=data["crc32c"],
            first_key=decode_key(data["first_key"]),
            sink_state=data.get("sink_state") or {},
            closed=data.get("closed", False),
            last=data.get("last", False),
        )


@dataclass(frozen=True)
class FileRecord:
    """A finished output file, under its final name."""

    name: str
    rows: int
    size: int
    #: None for a file egress did not write (a remote engine's unload)
    crc32c: int | None
    sha256: str | None
    parts: int
    first_key: Key | None
    last_key: Key | None
    #: A stitched range's piece: its parts' ``metas`` (Parquet row groups, offsets from
    #: the piece's start), for the footer the stitch writes.
    metas: tuple[bytes, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name, "rows": self.rows, "size": self.size, "crc32c": self.crc32c,
            "sha256": self.sha256, "parts": self.parts,
            "first_key": encode_key(self.first_key), "last_key": encode_key(self.last_key),
        }
        if self.metas:
            data["metas"] = [base64.b64encode(m).decode() for m in self.metas]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileRecord:
        data = dict(data)
        data["first_key"] = decode_key(data["first_key"])
        data["last_key"] = decode_key(data["last_key"])
        data["metas"] = tuple(base64.b64decode(m) for m in data.get("metas", ()))
        return cls(**data)


@dataclass(frozen=True)
class Checkpoint:
    """Progress of one task after its last committed part."""

    #: Key of the last row written; the next part reads strictly after it.
    cursor: Key | None = None
    rows: int = 0
    bytes: int = 0
    open_file: OpenFile | None = None
    files: tuple[FileRecord, ...] = ()
    #: Index the next opened file gets (1-based).
    next_file_index: int = 1
    done: bool = False
    #: The sink states of the open (or next) file's earlier attempts, when a resume started
    #: that file over because its upload was gone: a complete of such an attempt still
    #: running on the server may land later, and the sink must know that object as this
    #: file's. Cleared when the file is final.
    restarted_from: tuple[dict[str, Any], ...] = ()

    def evolve(self, **changes: Any) -> Checkpoint:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "cursor": encode_key(self.cursor),
            "rows": self.rows,
            "bytes": self.bytes,
            "open_file": self.open_file.to_json() if self.open_file else None,
            "files": [f.to_json() for f in self.files],
            "next_file_index": self.next_file_index,
            "done": self.done,
            "restarted_from": list(self.restarted_from),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        if data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported checkpoint version {data.get('version')!r}")
        return cls(
            cursor=decode_key(data["cursor"]),
            rows=data["rows"],
            bytes=data["bytes"],
            open_file=OpenFile.from_json(data["open_file"]) if data["open_file"] else None,
            files=tuple(FileRecord.from_json(f) for f in data["files"]),
            next_file_index=data["next_file_index"],
            done=data["done"],
            restarted_from=tuple(data.get("restarted_from") or ()),
        )

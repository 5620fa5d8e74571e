"""The Sink protocol: where committed parts go, and how a file becomes final.

Storing part *n* again replaces it (a resumed task rewrites the part it had not
committed). A file appears under its final name only once complete; readers never see
a partial file.

On resume the engine asks ``verify_parts`` how many of the checkpoint's parts the sink
still holds as recorded, and rewinds the file to that point when they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO, Protocol

from egress.domain.checkpoint import PartRecord


class Sink(Protocol):
    #: Human-readable location (a directory, ``s3://bucket/prefix``), without secrets.
    location: str
    #: Smallest part the sink accepts, except for a file's last part (S3: 5 MiB).
    min_part_bytes: int
    @property
    def max_parts(self) -> int | None:
        """Most parts one file may have (S3: 10,000); None when unlimited."""
        ...

    def for_export(self, *segments: str) -> Sink:
        """The same kind of sink under ``location/seg1/seg2…`` (segments made safe)."""
        ...

    def start_file(self, name: str, earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """Begin a file; the returned state is persisted in the checkpoint. ``earlier``:
        the states of this file's abandoned attempts (a resume that started it over), whose
        late completion the sink must recognise as this file."""
        ...

    def put_part(
        self, name: str, state: dict[str, Any], number: int, offset: int, data: bytes
    ) -> str | None:
        """Store part ``number`` (starting at byte ``offset``); returns an ETag or None."""
        ...

    def complete_file(
        self, name: str, state: dict[str, Any], size: int, parts: Sequence[PartRecord]
    ) -> str | None:
        """Make the file final under ``name`` from the checkpoint's ``parts``; idempotent.
        Returns its SHA-256 if known (S3: None, the manifest carries the CRC32C)."""
        ...

    def verify_parts(self, name: str, state: dict[str, Any], parts: Sequence[PartRecord]) -> int:
        """How many of ``parts``, from the first, the sink holds as recorded (all of them
        when the file is already final)."""
        ...

    def abort_file(self, name: str, state: dict[str, Any]) -> None:
        """Drop an unfinished file and whatever was stored of it."""
        ...

    def release(self) -> None:
        """A slice ended with every part it stored committed: what this writer holds may
        be taken over by the next one (local: its staged copies are sealed)."""
        ...

    def put_object(self, name: str, data: bytes) -> None:
        """Store a small object atomically (manifest, ``_SUCCESS``)."""
        ...

    def get_object(self, name: str) -> bytes:
        """The content of a small final object (the manifest)."""
        ...

    def exists(self, name: str) -> bool: ...

    def delete(self, name: str) -> None: ...

    # --- files written by someone else (a remote engine's unload) ---------------------

    def url_of(self, folder: str) -> str:
        """Where another writer puts ``folder`` of this sink (``s3://…/``, ``file://…/``)."""
        ...

    def list_files(self, folder: str) -> list[tuple[str, int]]:
        """``(name, size)`` of every file under ``folder/``, in name order."""
        ...

    def open_reader(self, name: str, size: int) -> BinaryIO:
        """A seekable reader of ``name`` (reading only what is read: a Parquet footer)."""
        ...

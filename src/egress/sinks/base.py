"""The Sink protocol: where committed parts go, and how a file becomes final.

Storing part *n* again replaces it (a resumed task rewrites the part it had not
committed). A file appears under its final name only once complete; readers never see
a partial file.
"""

from __future__ import annotations

from typing import Any, Protocol


class Sink(Protocol):
    #: Human-readable location (a directory, ``s3://bucket/prefix``), without secrets.
    location: str
    #: Smallest part the sink accepts, except for a file's last part (S3: 5 MiB).
    min_part_bytes: int

    def start_file(self, name: str) -> dict[str, Any]:
        """Begin a file; the returned state is persisted in the checkpoint."""
        ...

    def put_part(
        self, name: str, state: dict[str, Any], number: int, offset: int, data: bytes
    ) -> str | None:
        """Store part ``number`` (starting at byte ``offset``); returns an ETag or None."""
        ...

    def complete_file(self, name: str, state: dict[str, Any], size: int) -> str | None:
        """Make the file final under ``name``; idempotent. Returns its SHA-256 if known."""
        ...

    def abort_file(self, name: str, state: dict[str, Any]) -> None:
        """Drop an unfinished file and whatever was stored of it."""
        ...

    def put_object(self, name: str, data: bytes) -> None:
        """Store a small object atomically (manifest, ``_SUCCESS``)."""
        ...

    def exists(self, name: str) -> bool: ...

    def delete(self, name: str) -> None: ...

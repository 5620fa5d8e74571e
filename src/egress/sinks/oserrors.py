"""File-system errors of local writes (the sink's files, a one-shot checkpoint) as
destination errors whose one-line message says what happened and what to do."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from egress.exceptions import DestinationFullError, SinkError

_FULL = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
}
_RESUME = "free space, then resume: committed parts are kept"


def destination_error(exc: OSError, doing: str) -> SinkError:
    """``doing`` (``cannot write /out/x.csv``) and why, as a SinkError: a full disk is a
    DestinationFullError (transient), a read-only one says so."""
    if exc.errno in _FULL:
        return DestinationFullError(f"{doing}: {_FULL[exc.errno]}; {_RESUME}")
    if exc.errno == errno.EROFS:
        return SinkError(
            f"{doing}: the file system is read-only; "
            "make it writable or choose another destination"
        )
    return SinkError(f"{doing}: {exc.strerror or exc}")


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], verb: str = "write") -> Iterator[None]:
    """Turn an OSError inside the block into the destination error of ``verb``-ing
    ``path`` (write, remove)."""
    try:
        yield
    except OSError as exc:
        raise destination_error(exc, f"cannot {verb} {os.fspath(path)}") from exc

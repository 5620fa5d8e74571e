"""File-system errors of local writes become destination errors that say what to do.
(ENOSPC and EROFS are produced for real in tests/integration/test_disk_errors.py; a
disk quota needs quota tooling, so EDQUOT is checked here.)"""

from __future__ import annotations

import errno
import os

import pytest

from egress.cli.errors import EXIT_DESTINATION, exit_code_for
from egress.exceptions import DestinationFullError, SinkError
from egress.sinks.oserrors import destination_error


@pytest.mark.parametrize(("code", "words", "transient"), [
    (errno.ENOSPC, "no space left on the device; free space, then resume", True),
    (errno.EDQUOT, "disk quota exceeded; free space, then resume", True),
    (errno.EROFS, "the file system is read-only", False),
    (errno.EIO, os.strerror(errno.EIO), False),
])
def test_disk_errors_are_destination_errors(code: int, words: str, transient: bool) -> None:
    exc = destination_error(OSError(code, os.strerror(code)), "cannot write /out/t.csv")
    assert isinstance(exc, SinkError)
    assert isinstance(exc, DestinationFullError) is transient and exc.transient is transient
    assert str(exc).startswith("cannot write /out/t.csv: ") and words in str(exc)
    assert "\n" not in str(exc)
    assert exit_code_for(exc) == EXIT_DESTINATION

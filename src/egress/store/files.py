"""The files of a SQLite store are its owner's alone (0600).

The store holds webhook signing secrets, token hashes and source names; SQLite would
create its file 0644 (less the umask). The database file is created here first, with
0600, and SQLite gives its ``-wal``, ``-shm`` and ``-journal`` files the database's
mode; the write-lock file is made 0600 by ``writelock``. Files an older egress left
open to other users are tightened when the store is opened (if this user owns them).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_ONLY = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal", "-writelock")


def secure_sqlite_files(database: Path) -> None:
    try:
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY)
    except FileExistsError:
        pass
    except OSError:
        return  # a missing directory, say: SQLite's own error will name it
    else:
        os.close(fd)  # an empty file is an empty database to SQLite
    for path in (database, *(Path(f"{database}{suffix}") for suffix in SIDE_FILES)):
        _tighten(path)


def _tighten(path: Path) -> None:
    try:
        st = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return
    fields = {"path": str(path), "mode": f"{mode:04o}"}
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        log.warning("job store file %s is open to other users (mode %04o) and owned by "
                    "another user; chmod 600 it", path, mode, extra=fields)
        return
    os.chmod(path, mode & ~0o077)
    log.warning("job store file %s was open to other users (mode %04o); made it %04o",
                path, mode, mode & ~0o077, extra=fields)

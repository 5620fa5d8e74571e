"""The home directory holds the embedded state (the SQLite store with webhook secrets,
the link-signing key): a new one is made for its owner alone (0700); an existing one
that other users may enter is reported, not changed (it may be a directory the user
shares on purpose)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

log = logging.getLogger(__name__)

HOME_MODE = 0o700


def ensure_home(home: Path) -> Path:
    home = Path(home)
    try:
        home.mkdir(mode=HOME_MODE, parents=True)  # parents keep the usual mode
    except FileExistsError:
        mode = stat.S_IMODE(home.stat().st_mode)
        if mode & 0o077:
            log.warning("home directory %s is open to other users (mode %04o) and holds "
                        "the job store and the link-signing key; chmod 700 it",
                        home, mode, extra={"path": str(home), "mode": f"{mode:04o}"})
    return home

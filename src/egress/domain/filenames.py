"""File-name-safe forms of user text (table names, path segments): pure, so that the
engine, the sinks and the API build names the same way."""

from __future__ import annotations

import hashlib
import re

#: The names egress writes beside the data files (engine/naming.py keeps data files
#: off them).
MANIFEST = "manifest.json"
SUCCESS = "_SUCCESS"
STATE_DIR = ".egress"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def name_hash(text: str) -> str:
    """A short, stable suffix that keeps names distinct once their unsafe characters are
    replaced."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def safe_base_name(table: str) -> str:
    """A file-name-safe form of a table name; a short hash keeps changed names distinct."""
    base = _UNSAFE.sub("_", table).lstrip(".") or "table"
    if base != table:
        base += "-" + name_hash(table)
    return base

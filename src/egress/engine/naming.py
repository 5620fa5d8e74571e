"""Names of output files. Built by egress only: user text never becomes a path as is."""

from __future__ import annotations

import hashlib
import re

from egress.domain.checkpoint import TaskSpec
from egress.formats import Format
from egress.formats.compression import Compression

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_base_name(table: str) -> str:
    """A file-name-safe form of a table name; a short hash keeps changed names distinct."""
    base = _UNSAFE.sub("_", table).lstrip(".") or "table"
    if base != table:
        base += "-" + hashlib.sha256(table.encode()).hexdigest()[:8]
    return base


def file_name(spec: TaskSpec, index: int, fmt: Format, compression: Compression) -> str:
    """``events.csv.gz``; ``events-00002.csv.gz`` when files are split by size;
    ``events/part-00001.parquet`` for a Parquet dataset."""
    if fmt.self_contained:
        return f"{spec.base_name}/part-{index:05d}.{fmt.extension}"
    numbered = f"-{index:05d}" if spec.max_file_size else ""
    return f"{spec.base_name}{numbered}.{fmt.extension}{compression.suffix}"

"""Names of output files. Built by egress only: user text never becomes a path as is.

Beside the data files egress writes ``manifest.json``, the ``_SUCCESS`` marker and (local
one-shot exports) the ``.egress`` state directory. A data file never takes one of those
names: a table whose output would (``manifest`` in JSON, ``_SUCCESS`` as a Parquet
dataset…) gets the same hash suffix as an unsafe name, decided once when it is planned.
"""

from __future__ import annotations

from collections.abc import Iterable

from egress.domain.checkpoint import TaskSpec
from egress.domain.filenames import MANIFEST, STATE_DIR, SUCCESS, name_hash, safe_base_name
from egress.exceptions import ConfigError
from egress.formats import Format
from egress.formats.compression import Compression

#: Where the pieces of a stitched split table wait for the export's finalize.
STITCH_DIR = f"{STATE_DIR}/ranges"
#: Top-level names egress writes itself; compared case-insensitively, as some file
#: systems (macOS, Windows) and S3 clients that mirror to them do.
RESERVED_NAMES = (MANIFEST, SUCCESS, STATE_DIR)
_RESERVED = frozenset(n.casefold() for n in RESERVED_NAMES)


def _name(base: str, numbered: bool, index: int, fmt: Format, compression: Compression,
          label: str | None = None) -> str:
    if fmt.dataset:
        return f"{base}/part-{label + '-' if label else ''}{index:05d}.{fmt.extension}"
    number = f"-{index:05d}" if numbered or label else ""
    return f"{base}{'.' + label if label else ''}{number}.{fmt.extension}{compression.suffix}"


def _reserved(name: str) -> bool:
    return name.split("/", 1)[0].casefold() in _RESERVED


def output_base_name(
    table: str, fmt: Format, compression: Compression, *, numbered: bool
) -> str:
    """The base name of ``table``'s files: ``safe_base_name``, plus its hash suffix when a
    file would take a reserved name (only the first file can: numbered names are longer)."""
    base = safe_base_name(table)
    if _reserved(_name(base, numbered, 1, fmt, compression)):
        base = f"{base}-{name_hash(table)}"
    return base


def assert_data_names_allowed(names: Iterable[str]) -> None:
    """Refuse data files named like egress's own (a checkpoint planned by a version
    that did not rename them): writing the manifest would destroy them."""
    for name in names:
        if _reserved(name):
            raise ConfigError(
                f"data file {name!r} takes a name reserved for egress's own files "
                f"({', '.join(RESERVED_NAMES)}); export the table again to get a renamed file"
            )


def file_name(spec: TaskSpec, index: int, fmt: Format, compression: Compression) -> str:
    """``events.csv.gz``; ``events-00002.csv.gz`` when files are split by size;
    ``events/part-00001.parquet`` for a Parquet dataset. A range task of a split table
    numbers its own files after its range's label, so that every file of the table sorts
    in key order: ``events.r01-00001.csv.gz``, ``events/part-r01-00001.parquet``."""
    label = spec.key_range.label if spec.key_range is not None else None
    if spec.stitch_name is not None and label is not None:
        # a stitched range's piece: hidden until the export's finalize joins the pieces
        return f"{STITCH_DIR}/{spec.stitch_name.replace('/', '__')}.{label}"
    return _name(spec.base_name, bool(spec.max_file_size), index, fmt, compression, label)

"""Formats by name. ``make_format`` is the registry; an unknown name lists the known ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from egress.exceptions import ConfigError, UnknownNameError
from egress.formats.base import Format
from egress.formats.compression import COMPRESSIONS, Compression, get_compression
from egress.formats.csv import CsvFormat
from egress.formats.jsonl import JsonArrayFormat, JsonLinesFormat
from egress.formats.parquet_codecs import CODECS as PARQUET_CODECS
from egress.formats.parquet_codecs import DEFAULT_CODEC
from egress.formats.sql import SqlDumpFormat


def _parquet() -> type[Format]:
    # its module imports pyarrow.parquet: ~30 ms of every start-up, loaded on first use
    from egress.formats.parquet import ParquetFormat

    return ParquetFormat


#: Each format's class by name, as a function that returns it (Parquet's imports it).
FORMATS: dict[str, Callable[[], type[Format]]] = {
    "csv": lambda: CsvFormat,
    "jsonl": lambda: JsonLinesFormat,
    "json": lambda: JsonArrayFormat,
    "sql": lambda: SqlDumpFormat,
    "parquet": _parquet,
}


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise UnknownNameError("format", name, FORMATS)
    return name


def default_compression(name: str) -> str:
    """The compression of a ``name`` export that sets none: Parquet's codec, else none."""
    return DEFAULT_CODEC if check_format(name) == "parquet" else "none"


def resolve_compression(format: str, compression: str | None) -> str:
    """``compression`` checked for ``format`` (Parquet's codecs include snappy, which
    compresses inside the file; the text formats compress the stream), or the format's
    default when None."""
    if compression is None:
        return default_compression(format)
    if check_format(format) == "parquet":
        if compression not in PARQUET_CODECS:
            raise UnknownNameError("Parquet compression", compression, PARQUET_CODECS)
        return compression
    get_compression(compression)
    return compression


def make_format(name: str, options: dict[str, Any]) -> Format:
    """A format instance; ``options`` are the format's keyword arguments."""
    cls: Any = FORMATS[check_format(name)]()
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad options for format {name!r}: {exc}") from exc


__all__ = [
    "COMPRESSIONS",
    "FORMATS",
    "Compression",
    "Format",
    "check_format",
    "default_compression",
    "get_compression",
    "make_format",
    "resolve_compression",
]

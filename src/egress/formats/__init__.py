"""Formats by name. ``make_format`` is the registry; an unknown name lists the known ones."""

from __future__ import annotations

from typing import Any

from egress.exceptions import ConfigError, UnknownNameError
from egress.formats.base import Format
from egress.formats.compression import COMPRESSIONS, Compression, get_compression
from egress.formats.csv import CsvFormat
from egress.formats.jsonl import JsonArrayFormat, JsonLinesFormat
from egress.formats.parquet import ParquetFormat
from egress.formats.sql import SqlDumpFormat

FORMATS: dict[str, Any] = {
    "csv": CsvFormat,
    "jsonl": JsonLinesFormat,
    "json": JsonArrayFormat,
    "sql": SqlDumpFormat,
    "parquet": ParquetFormat,
}


def check_format(name: str) -> str:
    if name not in FORMATS:
        raise UnknownNameError("format", name, FORMATS)
    return name


def make_format(name: str, options: dict[str, Any]) -> Format:
    """A format instance; ``options`` are the format's keyword arguments."""
    cls = FORMATS[check_format(name)]
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for format {name!r}: {exc}") from exc


__all__ = [
    "COMPRESSIONS",
    "FORMATS",
    "Compression",
    "Format",
    "check_format",
    "get_compression",
    "make_format",
]

"""Parquet's codecs, apart from the format: checking a request needs only these names,
and ``formats/parquet.py`` imports pyarrow.parquet (~30 ms of a start-up that a text
export or an idle worker need not pay)."""

from __future__ import annotations

CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd", "snappy": "snappy"}
#: Parquet written without ``--compression``: see docs/formats.md for the measurements
DEFAULT_CODEC = "zstd"

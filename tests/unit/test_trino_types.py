"""Trino's types as Arrow: each type, as the client protocol sends its values, comes out
of ``to_batch`` as the value it stands for, and survives a trip through Parquet."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egress.sources.trino_types import column, to_batch

UTC = dt.UTC

# (trino type, JSON value as the protocol sends it, Arrow type, Python value expected)
CASES = [
    ("bigint", 9007199254740993, pa.int64(), 9007199254740993),
    ("integer", -2147483648, pa.int32(), -2147483648),
    ("smallint", 32767, pa.int16(), 32767),
    ("tinyint", -128, pa.int8(), -128),
    ("boolean", True, pa.bool_(), True),
    ("real", 1.5, pa.float32(), 1.5),
    ("double", "Infinity", pa.float64(), math.inf),
    ("decimal(38,10)", "1234567890123456789012345678.0123456789", pa.decimal128(38, 10),
     decimal.Decimal("1234567890123456789012345678.0123456789")),
    ("decimal(5,2)", "-123.45", pa.decimal128(5, 2), decimal.Decimal("-123.45")),
    ("varchar", "naïve ☃ \"quoted\", comma", pa.string(), "naïve ☃ \"quoted\", comma"),
    ("varchar(20)", "short", pa.string(), "short"),
    ("char(3)", "ab ", pa.string(), "ab "),
    ("varbinary", base64.b64encode(b"\x00\xffbytes").decode(), pa.binary(), b"\x00\xffbytes"),
    ("date", "2026-11-24", pa.date32(), dt.date(2026, 11, 24)),
    ("time(3)", "10:15:30.123", pa.time64("us"), dt.time(10, 15, 30, 123000)),
    ("timestamp(3)", "2026-11-24 10:15:30.123", pa.timestamp("ms"),
     dt.datetime(2026, 11, 24, 10, 15, 30, 123000)),
    ("timestamp(6)", "2026-11-24 10:15:30.123456", pa.timestamp("us"),
     dt.datetime(2026, 11, 24, 10, 15, 30, 123456)),
    ("timestamp(3) with time zone", "2026-11-24 10:15:30.123 UTC",
     pa.timestamp("ms", tz="UTC"), dt.datetime(2026, 11, 24, 10, 15, 30, 123000, UTC)),
    ("timestamp(3) with time zone", "2026-11-24 11:15:30.000 +01:00",
     pa.timestamp("ms", tz="UTC"), dt.datetime(2026, 11, 24, 10, 15, 30, tzinfo=UTC)),
    ("timestamp(6) with time zone", "2026-07-01 12:00:00.000001 Europe/Paris",
     pa.timestamp("us", tz="UTC"), dt.datetime(2026, 7, 1, 10, 0, 0, 1, UTC)),
    ("json", '{"a":[1,2]}', pa.string(), '{"a":[1,2]}'),
    ("uuid", "12151fd2-7586-11e9-8f9e-2a86e4085a59", pa.string(),
     "12151fd2-7586-11e9-8f9e-2a86e4085a59"),
    ("array(integer)", [1, None, 3], pa.string(), "[1,null,3]"),
    ("map(varchar, bigint)", {"k": 1}, pa.string(), '{"k":1}'),
    ("row(x integer, y varchar)", [1, "é"], pa.string(), '[1,"é"]'),
]


@pytest.mark.parametrize(("trino_type", "sent", "arrow_type", "expected"), CASES,
                         ids=[f"{c[0]}:{i}" for i, c in enumerate(CASES)])
def test_each_type_round_trips(trino_type: str, sent: object, arrow_type: pa.DataType,
                               expected: object) -> None:
    col = column("v", trino_type)
    assert col.arrow_type == arrow_type
    assert col.source_type == trino_type  # kept for the manifest and SQL dumps
    batch = to_batch([col], [[sent], [None]])
    assert batch.column(0).to_pylist() == [expected, None]
    # and through a Parquet file, as an export writes it
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_batches([batch]), buffer)
    back = pq.read_table(io.BytesIO(buffer.getvalue())).column(0).to_pylist()
    assert back == [expected, None]


def test_nested_and_json_types_are_marked_json() -> None:
    for t in ("json", "array(integer)", "map(varchar, bigint)", "row(x integer)"):
        assert column("v", t).logical_type == "json"
    assert column("v", "uuid").logical_type == "uuid"


def test_nan_is_kept() -> None:
    batch = to_batch([column("v", "double")], [["NaN"]])
    assert math.isnan(batch.column(0)[0].as_py())


def test_unknown_types_stay_text() -> None:
    col = column("v", "ipaddress")
    assert col.arrow_type == pa.string()
    assert to_batch([col], [["10.0.0.1"]]).column(0).to_pylist() == ["10.0.0.1"]


def test_hidden_columns_ride_along() -> None:
    batch = to_batch([column("v", "bigint")], [[1], [2]],
                     {"__egress_row": pa.array([0, 1], pa.int64())})
    assert batch.schema.names == ["v", "__egress_row"]

"""render: the text of each Arrow type, vectorised, as CSV, JSON and SQL write it."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import random
import sqlite3
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from egress.formats import render
from egress.sources.base import LOGICAL_TYPE


def field(array: pa.Array, **metadata: str) -> pa.Field:
    return pa.field("c", array.type, metadata={k.encode(): v.encode() for k, v in metadata.items()})


def random_doubles(n: int) -> list[float]:
    rng = random.Random(7)
    values = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(n)]
    values += [rng.uniform(-1e6, 1e6) for _ in range(n)]
    values += [0.1, 1 / 3, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e16, 1e-7]
    return [v for v in values if v == v]


def test_floats_are_shortest_text_that_reads_back() -> None:
    values = random_doubles(2000)
    text = render.text(pa.array(values, pa.float64()), pa.field("c", pa.float64())).to_pylist()
    assert [float(t) for t in text] == values
    assert text[-3:] == ["1.7976931348623157e+308", "1e+16", "1e-7"]
    as_json = render.json_value(pa.array(values), pa.field("c", pa.float64())).to_pylist()
    assert [json.loads(t) for t in as_json] == values


def test_non_finite_floats() -> None:
    array = pa.array([float("nan"), float("inf"), float("-inf"), None, 1.5])
    f = pa.field("c", pa.float64())
    assert render.text(array, f).to_pylist() == ["NaN", "Infinity", "-Infinity", None, "1.5"]
    assert render.json_value(array, f).to_pylist() == [
        '"NaN"', '"Infinity"', '"-Infinity"', None, "1.5"]
    sqlite = render.sql_literal(array, f, "sqlite").to_pylist()
    assert sqlite == ["NULL", "9e999", "-9e999", None, "1.5"]
    conn = sqlite3.connect(":memory:")
    assert conn.execute("SELECT 9e999, -9e999").fetchone() == (float("inf"), float("-inf"))


def test_negative_zero_keeps_its_sign_in_json() -> None:
    text = render.json_value(pa.array([-0.0, 0.0]), pa.field("c", pa.float64())).to_pylist()
    assert text == ["-0.0", "0"]


def test_decimals_dates_and_timestamps() -> None:
    dec = pa.array([decimal.Decimal("1.5"), decimal.Decimal("-0.001"), None], pa.decimal128(10, 3))
    assert render.text(dec, field(dec)).to_pylist() == ["1.500", "-0.001", None]
    assert render.json_value(dec, field(dec)).to_pylist() == ['"1.500"', '"-0.001"', None]
    assert render.sql_literal(dec, field(dec), "sqlite").to_pylist() == ["1.500", "-0.001", None]
    day = pa.array([dt.date(2024, 2, 29), dt.date(1, 1, 1)], pa.date32())
    assert render.text(day, field(day)).to_pylist() == ["2024-02-29", "0001-01-01"]
    moment = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
    naive = pa.array([moment], pa.timestamp("us"))
    assert render.text(naive, field(naive)).to_pylist() == ["2024-01-02 03:04:05.000006"]
    aware = pa.array([moment.replace(tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC"))
    assert render.text(aware, field(aware)).to_pylist() == ["2024-01-02 03:04:05.000006Z"]
    assert render.json_value(aware, field(aware)).to_pylist() == ['"2024-01-02 03:04:05.000006Z"']
    assert dt.datetime.fromisoformat(render.text(aware, field(aware))[0].as_py()) == \
        moment.replace(tzinfo=dt.UTC)


def test_booleans() -> None:
    array = pa.array([True, False, None])
    assert render.text(array, field(array)).to_pylist() == ["true", "false", None]
    assert render.json_value(array, field(array)).to_pylist() == ["true", "false", None]
    assert render.sql_literal(array, field(array), "sqlite").to_pylist() == ["1", "0", None]
    assert render.sql_literal(array, field(array), "postgresql").to_pylist() == [
        "TRUE", "FALSE", None]


def test_binary_of_a_slice() -> None:
    whole = pa.array([b"skip", b"\x00\xff", b"", None, bytes(range(256))], pa.binary())
    array = whole.slice(1)
    text = render.text(array, field(array)).to_pylist()
    assert text == ["\\x00ff", "\\x", None, "\\x" + bytes(range(256)).hex()]
    as_json = render.json_value(array, field(array)).to_pylist()
    assert [base64.b64decode(json.loads(t)) if t else t for t in as_json] == [
        b"\x00\xff", b"", None, bytes(range(256))]
    sql = render.sql_literal(array, field(array), "sqlite").to_pylist()
    conn = sqlite3.connect(":memory:")
    assert [conn.execute(f"SELECT {s}").fetchone()[0] if s else None for s in sql] == [
        b"\x00\xff", b"", None, bytes(range(256))]


def random_strings(n: int) -> list[str]:
    rng = random.Random(3)
    alphabet = [chr(c) for c in range(1, 0x80)] + ["é", "日", "🎉", "\u2028", "\u2029", "\ufeff"]
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(n)
    ]


def test_json_strings_read_back() -> None:
    values = [*random_strings(3000), "", "\\", '"', "\x00", "\x1f", "\x7f"]
    array = pa.array(["skip", *values]).slice(1)
    text = render.json_string(array).to_pylist()
    assert [json.loads(t) for t in text] == values
    # plain strings take the fast path and are only quoted
    assert render.json_string(pa.array(["plain", None])).to_pylist() == ['"plain"', None]


def test_json_column_is_embedded_as_is() -> None:
    array = pa.array(['{"a":[1,2]}', None, "3"])
    f = field(array, **{LOGICAL_TYPE.decode(): "json"})
    assert render.json_value(array, f).to_pylist() == ['{"a":[1,2]}', None, "3"]
    assert render.json_value(array, field(array)).to_pylist() == ['"{\\"a\\":[1,2]}"', None, '"3"']


def test_sql_strings_load_back_in_sqlite() -> None:
    values = [*random_strings(500), "it's", "''", "a\r\nb", "\r", "\r" * 3000]
    array = pa.array(values)
    literals = render.sql_literal(array, field(array), "sqlite").to_pylist()
    conn = sqlite3.connect(":memory:")
    for value, literal in zip(values, literals, strict=True):
        got, kind = conn.execute(f"SELECT {literal}, typeof({literal})").fetchone()
        assert (got, kind) == (value, "text")
    # a text with a CR is spliced in as hex, whatever the number of CRs
    assert literals[-1].startswith("CAST(X'0d0d") and literals[-1].endswith("' AS TEXT)")
    # PostgreSQL keeps its own quoting
    assert render.sql_literal(pa.array(["a\rb"]), pa.field("c", pa.string()),
                              "postgresql").to_pylist() == ["'a\rb'"]


def expected_sql_string(value: str | None, dialect: str) -> str | None:
    if value is None:
        return None
    if dialect == "sqlite" and "\r" in value:
        return "CAST(X'" + value.encode().hex() + "' AS TEXT)"
    return "'" + value.replace("'", "''") + "'"


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_sql_strings_only_quotes_and_crs_cost_a_pass(dialect: str) -> None:
    # values with and without quotes and CRs, nulls, a slice (offsets into a shared
    # buffer), arrays with no quote or no CR at all, and a CR or quote hidden under a
    # null slot (its bytes are in the buffer, but the value is NULL)
    mixed = [None, "plain", "it's", "a\r\nb", "", "'\r'", None, "ü'\r", "x" * 50]
    cases = [pa.array(mixed), pa.array(mixed).slice(2, 5), pa.array(["a", "b", None]),
             pa.array(["no quote\r", None]), pa.array(["only 'quotes'", None]),
             pa.array([], pa.string()), pa.array([None, None], pa.string())]
    data = pa.py_buffer(b"ok'\rhidden")
    hidden = pa.StringArray.from_buffers(
        2, pa.py_buffer(struct.pack("<3i", 0, 2, 10)), data,
        null_bitmap=pa.py_buffer(bytes([0b01])), null_count=1)
    cases.append(hidden)
    for array in cases:
        got = render.sql_string(array, dialect).to_pylist()
        assert got == [expected_sql_string(v, dialect) for v in array.to_pylist()], array


def dynamic(codes: list[int], ints: list, reals: list, texts: list, blobs: list) -> pa.Array:
    return pa.UnionArray.from_sparse(
        pa.array(codes, pa.int8()),
        [pa.array(ints, pa.int64()), pa.array(reals, pa.float64()),
         pa.array(texts, pa.string()), pa.array(blobs, pa.binary())],
        field_names=["integer", "real", "text", "blob"],
    )


def test_a_union_renders_each_value_as_its_own_type() -> None:
    n = None
    whole = dynamic(
        [0, 0, 1, 2, 3, 2, 0],
        [99, 10, n, n, n, n, n], [n, n, 2.5, n, n, n, n], [n, n, n, "x,y", n, "", n],
        [n, n, n, n, b"\x01", n, n],
    )
    array = whole.slice(1)  # the type codes must follow the slice's offset
    f = pa.field("c", array.type)
    assert render.text(array, f).to_pylist() == ["10", "2.5", "x,y", "\\x01", "", None]
    assert render.json_value(array, f).to_pylist() == [
        "10", "2.5", '"x,y"', '"AQ=="', '""', None]
    sql = render.sql_literal(array, f, "sqlite").to_pylist()
    conn = sqlite3.connect(":memory:")
    got = [conn.execute(f"SELECT typeof({s}), {s}").fetchone() if s else None for s in sql]
    assert got == [("integer", 10), ("real", 2.5), ("text", "x,y"), ("blob", b"\x01"),
                   ("text", ""), None]


def test_lists_as_json_arrays() -> None:
    array = pa.array([[1, None, 3], [], None], pa.list_(pa.int64()))
    f = pa.field("c", array.type)
    assert render.json_value(array, f).to_pylist() == ["[1,null,3]", "[]", None]
    assert render.text(array, f).to_pylist() == ["[1,null,3]", "[]", None]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_nulls_stay_null(dialect: str) -> None:
    for array in (pa.array([None], pa.int64()), pa.array([None], pa.string()),
                  pa.array([None], pa.binary()), pa.array([None], pa.float64())):
        f = pa.field("c", array.type)
        assert render.text(array, f).to_pylist() == [None]
        assert render.json_value(array, f).to_pylist() == [None]
        assert render.sql_literal(array, f, dialect).to_pylist() == [None]
    assert pc.all(pc.is_null(render.text(pa.nulls(3, pa.date32()), pa.field("d", pa.date32()))))

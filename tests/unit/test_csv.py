"""CSV: RFC 4180, NULL apart from the empty string, parts that concatenate."""

from __future__ import annotations

import csv
import io
import random

import pyarrow as pa
import pytest

from egress.exceptions import ConfigError
from egress.formats.csv import CsvFormat


def encode(fmt: CsvFormat, batch: pa.RecordBatch) -> str:
    part = fmt.part_encoder(batch.schema, 0)
    part.add(batch)
    data = fmt.header(batch.schema) + part.finish() + fmt.footer(batch.schema, batch.num_rows)
    return data.decode()


def test_null_and_empty_string_in_one_batch() -> None:
    batch = pa.record_batch([pa.array([1, 2, 3]), pa.array(["", None, "x"])], names=["id", "s"])
    assert encode(CsvFormat(), batch) == 'id,s\r\n1,""\r\n2,\r\n3,x\r\n'


def test_quoting_only_when_needed() -> None:
    values = ["plain", "a,b", 'say "hi"', "l1\nl2", "cr\r", " spaced ", "tab\t", None]
    batch = pa.record_batch([pa.array(values)], names=["v"])
    assert encode(CsvFormat(), batch) == (
        'v\r\nplain\r\n"a,b"\r\n"say ""hi"""\r\n"l1\nl2"\r\n"cr\r"\r\n spaced \r\ntab\t\r\n\r\n'
    )


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|", " ", "0", "-", "e"])
def test_random_text_reads_back_with_the_stdlib(delimiter: str) -> None:
    rng = random.Random(11)
    alphabet = [*'ab,;|\t "\r\n\\é日0-e.:', "🎉"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 10)))
             for _ in range(500)]
    numbers = [rng.uniform(-1e10, 1e10) for _ in range(500)]
    batch = pa.record_batch([pa.array(range(500)), pa.array(texts), pa.array(numbers)],
                            names=["id", "t;x", "n"])
    text = encode(CsvFormat(delimiter), batch)
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    assert rows[0] == ["id", "t;x", "n"]
    assert [r[1] for r in rows[1:]] == texts
    assert [int(r[0]) for r in rows[1:]] == list(range(500))
    assert [float(r[2]) for r in rows[1:]] == numbers


def test_header_names_are_quoted_when_needed() -> None:
    schema = pa.schema([pa.field("a,b", pa.int64()), pa.field('q"', pa.int64())])
    assert CsvFormat().header(schema) == b'"a,b","q"""\r\n'


def test_a_single_column_of_nulls() -> None:
    batch = pa.record_batch([pa.array([None, ""], pa.string())], names=["v"])
    text = encode(CsvFormat(), batch)
    assert text == 'v\r\n\r\n""\r\n'
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["v"], [], [""]]


def test_parts_concatenate() -> None:
    fmt = CsvFormat()
    a = pa.record_batch([pa.array([1, 2])], names=["id"])
    b = pa.record_batch([pa.array([3])], names=["id"])
    first, second = fmt.part_encoder(a.schema, 0), fmt.part_encoder(a.schema, 2)
    first.add(a)
    second.add(b)
    assert fmt.header(a.schema) + first.finish() + second.finish() == b"id\r\n1\r\n2\r\n3\r\n"
    assert first.size == len(b"1\r\n2\r\n")


@pytest.mark.parametrize("bad", ["", ";;", '"', "\r", "\n"])
def test_bad_delimiters_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="delimiter must be one character"):
        CsvFormat(bad)


def test_postgres_dialect_writes_the_header_as_the_server_writes_rows() -> None:
    schema = pa.schema([("id", pa.int64()), ("a,b", pa.string()), ('q"', pa.string())])
    fmt = CsvFormat(csv_dialect="postgres")
    assert fmt.server_rows and not CsvFormat().server_rows
    assert fmt.header(schema) == b'id,"a,b","q"""\n'
    assert CsvFormat().header(schema) == b'id,"a,b","q"""\r\n'


@pytest.mark.parametrize(("kw", "message"), [
    ({"csv_dialect": "excel"}, "unknown CSV dialect 'excel'; known: egress, postgres"),
    ({"csv_dialect": "postgres", "delimiter": "\\"}, "one-byte delimiter other than a backslash"),
    ({"csv_dialect": "postgres", "delimiter": "é"}, "one-byte delimiter other than a backslash"),
])
def test_bad_dialect_options_are_refused(kw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CsvFormat(**kw)

"""Parquet footers moved and merged as bytes (formats/parquet_footer.py) are the footers
that decoding them into Thrift objects, changing those and encoding them again makes
(thriftpy2 with parquet-format's IDL: what egress did until session 27, so the bytes
of files and checkpoints stay what they were), and pyarrow reads them."""

from __future__ import annotations

import copy
import datetime
import decimal
import io
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egress.formats import parquet_footer
from egress.formats.parquet_footer import MAGIC, file_tail, merged, moved
from egress.formats.thrift_compact import (
    ThriftError,
    encode_int,
    encode_list_header,
    fields,
    list_header,
    read_int,
    varint,
)

IDL = Path(parquet_footer.__file__).with_name("parquet.thrift")


@pytest.fixture(scope="module")
def thrift() -> Any:
    import thriftpy2

    return thriftpy2.load(str(IDL), module_name="reference_parquet_thrift")


def decode(thrift: Any, data: bytes) -> Any:
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import deserialize

    return deserialize(thrift.FileMetaData(), data, TCompactProtocolFactory())


def encode(meta: Any) -> bytes:
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import serialize

    return bytes(serialize(meta, TCompactProtocolFactory()))


def reference_moved(thrift: Any, footer: bytes, delta: int) -> bytes:
    meta = decode(thrift, footer)
    for group in meta.row_groups or ():
        if group.file_offset is not None:
            group.file_offset += delta
        for chunk in group.columns:
            if chunk.file_offset:
                chunk.file_offset += delta
            cm = chunk.meta_data
            cm.data_page_offset += delta
            for name in ("dictionary_page_offset", "index_page_offset",
                         "bloom_filter_offset"):
                if getattr(cm, name) is not None:
                    setattr(cm, name, getattr(cm, name) + delta)
    return encode(meta)


def reference_merged(thrift: Any, footers: list[bytes]) -> bytes:
    metas = [decode(thrift, f) for f in footers]
    groups = [g for m in metas for g in m.row_groups or ()]
    for ordinal, group in enumerate(groups):
        if group.ordinal is not None:
            group.ordinal = ordinal
    result = copy.copy(metas[0])
    result.row_groups, result.num_rows = groups, sum(m.num_rows for m in metas)
    return encode(result)


def footer_of(data: bytes) -> bytes:
    (length,) = struct.unpack("<i", data[-8:-4])
    return data[-8 - length:-8]


def table(rows: int, start: int = 0) -> pa.Table:
    """Columns of many types, nulls among them, and more than 15 (a long list header)."""
    ids = list(range(start, start + rows))
    columns: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.int64()),
        "small": pa.array([i % 7 if i % 5 else None for i in ids], pa.int16()),
        "ratio": pa.array([i / 3 for i in ids], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in ids]),
        "name": pa.array([f"name {i % 11}" if i % 4 else None for i in ids]),
        "blob": pa.array([bytes([i % 256]) * (i % 9) for i in ids], pa.binary()),
        "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
        "when": pa.array([datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i)
                          for i in ids], pa.timestamp("us", tz="UTC")),
        "day": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 400)
                         for i in ids]),
        "tags": pa.array([[i, i + 1] if i % 3 else [] for i in ids], pa.list_(pa.int32())),
        "kind": pa.array([("a", "b", "c")[i % 3] for i in ids]).dictionary_encode(),
    }
    for k in range(6):
        columns[f"extra_{k}"] = pa.array([i * k for i in ids], pa.int32())
    return pa.table(columns)


def written(rows: int, row_group: int, **options: Any) -> bytes:
    out = io.BytesIO()
    pq.write_table(table(rows), out, row_group_size=row_group, **options)
    return out.getvalue()


FILES = {
    "zstd, one group": dict(rows=300, row_group=300, compression="zstd"),
    "plain, 20 groups": dict(rows=2000, row_group=100, compression="none",
                             use_dictionary=False),
    "snappy, dictionaries, 3 groups": dict(rows=900, row_group=300, compression="snappy"),
    "no statistics": dict(rows=50, row_group=50, write_statistics=False),
    "no rows": dict(rows=0, row_group=10),
}


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("delta", [0, 1, -4, 1000, 2**40])
def test_a_moved_footer_is_the_one_thrift_objects_give(thrift: Any, name: str,
                                                       delta: int) -> None:
    footer = footer_of(written(**FILES[name]))
    assert moved(footer, delta) == reference_moved(thrift, footer, delta)


def test_a_moved_footer_points_pyarrow_at_the_row_groups_where_they_land() -> None:
    data = written(**FILES["snappy, dictionaries, 3 groups"])
    footer = footer_of(data)
    body = data[len(MAGIC):-8 - len(footer)]
    pad = b"x" * 123_456  # what came before in the real file
    shifted = MAGIC + pad + body + file_tail(moved(footer, len(pad)))
    assert pq.read_table(io.BytesIO(shifted)).equals(pq.read_table(io.BytesIO(data)))
    before = pq.read_metadata(io.BytesIO(data)).row_group(1).column(2)
    after = pq.read_metadata(io.BytesIO(shifted)).row_group(1).column(2)
    assert after.data_page_offset == before.data_page_offset + len(pad)


@pytest.mark.parametrize("parts", [1, 2, 7, 16])
def test_merged_footers_are_the_one_thrift_objects_give(thrift: Any, parts: int) -> None:
    footers, at = [], len(MAGIC)
    for k in range(parts):
        data = written(rows=40 * (k + 1), row_group=40, compression="zstd")
        footer = footer_of(data)
        footers.append(moved(footer, at - len(MAGIC)))
        at += len(data) - len(MAGIC) - 8 - len(footer)
    assert merged(footers) == reference_merged(thrift, footers)


def test_a_file_of_parts_with_the_merged_footer_reads_back_whole() -> None:
    bodies, footers, at = [], [], len(MAGIC)
    for k in range(18):  # more row groups than a short list header holds
        out = io.BytesIO()
        pq.write_table(table(25, start=25 * k), out, compression="zstd")
        data = out.getvalue()
        footer = footer_of(data)
        bodies.append(data[len(MAGIC):-8 - len(footer)])
        footers.append(moved(footer, at - len(MAGIC)))
        at += len(bodies[-1])
    whole = MAGIC + b"".join(bodies) + file_tail(merged(footers))
    meta = pq.read_metadata(io.BytesIO(whole))
    assert (meta.num_rows, meta.num_row_groups) == (450, 18)
    assert pq.read_table(io.BytesIO(whole)).to_pydict() == table(450).to_pydict()


def test_a_footer_with_page_indexes_is_not_moved() -> None:
    footer = footer_of(written(rows=100, row_group=50, write_page_index=True))
    with pytest.raises(ValueError, match="page indexes"):
        moved(footer, 10)


@pytest.mark.parametrize("bad", [b"", b"\x15", b"\x19\xfc\x05", b"garbage" * 3])
def test_bytes_that_are_no_footer_are_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        moved(bad, 1)


def test_a_struct_without_row_groups_is_no_footer_to_merge() -> None:
    # well-formed Thrift (field 1 an i32, field 3 an i64, the stop), but no field 4
    struct_only = b"\x15\x02\x26" + encode_int(7) + b"\x00"
    good = footer_of(written(rows=100, row_group=50))
    for footers in ([struct_only], [good, struct_only]):
        with pytest.raises(ValueError, match="no list of row groups"):
            merged(footers)


def test_integers_and_list_headers_encode_as_the_protocol_says() -> None:
    # zigzag varints: 0 → 00, -1 → 01, 1 → 02, 64 → 80 01
    assert [encode_int(v) for v in (0, -1, 1, -64, 64)] == [
        b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80\x01"]
    for value in (0, 5, -5, 2**31, -(2**40), 2**62):
        data = b"\x16" + encode_int(value) + b"\x00"  # field 1, i64, then stop
        found, end = fields(data)
        assert read_int(data, found[0]) == value and end == len(data)
    assert encode_list_header(12, 3) == b"\x3c"
    assert list_header(encode_list_header(12, 300), 0)[:2] == (12, 300)
    with pytest.raises(ThriftError):
        varint(b"\xff" * 11, 0)

"""Checkpoints and task specs are plain JSON values: they round-trip exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest

from egress.domain.checkpoint import (
    Checkpoint,
    FileRecord,
    OpenFile,
    PartRecord,
    TaskSpec,
)

KEYS = [
    (7,), ("text", -3), (b"\x00\xff",), (1.5,), (decimal.Decimal("-0.010"),),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), dt.date(2024, 1, 2)),
    (dt.datetime(2024, 1, 2, 3, 4, 5), True), (dt.time(1, 2, 3),),
]


def through_json(data: dict) -> dict:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_checkpoint_round_trip(key: tuple) -> None:
    parts = (
        PartRecord(number=1, rows=10, size=100, crc32c=0xFFFFFFFF, etag='"abc"', last_key=key),
        PartRecord(number=2, rows=3, size=7, crc32c=0, etag=None),
    )
    cp = Checkpoint(
        cursor=key,
        rows=13,
        bytes=2**40,
        open_file=OpenFile(
            index=3, name="t-00003.csv.gz", parts=parts, rows=13, size=107, crc32c=12345,
            first_key=key, sink_state={"upload_id": "u-1", "nested": [1, {"a": None}]},
            sha256_state="ab" * 32 + ":107:" + "cd" * 43, closed=True, last=True,
        ),
        files=(
            FileRecord(name="t-00001.csv.gz", rows=5, size=50, crc32c=1, sha256="ab" * 32,
                       parts=1, first_key=key, last_key=key),
            FileRecord(name="t-00002.csv.gz", rows=0, size=20, crc32c=2, sha256=None,
                       parts=1, first_key=None, last_key=None),
        ),
        next_file_index=4,
        done=False,
    )
    back = Checkpoint.from_json(through_json(cp.to_json()))
    assert back == cp
    assert [type(v) for v in back.cursor] == [type(v) for v in key]  # type: ignore[union-attr]
    assert back.to_json() == cp.to_json()


def test_empty_checkpoint_round_trip() -> None:
    assert Checkpoint.from_json(through_json(Checkpoint().to_json())) == Checkpoint()


def test_unknown_version_is_refused() -> None:
    data = Checkpoint().to_json()
    data["version"] = 999
    with pytest.raises(ValueError, match="unsupported checkpoint version 999"):
        Checkpoint.from_json(data)


def test_evolve_replaces_without_mutating() -> None:
    cp = Checkpoint(rows=1)
    new = cp.evolve(rows=2, done=True)
    assert cp.rows == 1 and not cp.done and new.rows == 2 and new.done


def test_next_part_number() -> None:
    of = OpenFile(index=1, name="x")
    assert of.next_part_number == 1
    part = PartRecord(number=1, rows=1, size=1, crc32c=0)
    assert OpenFile(index=1, name="x", parts=(part,)).next_part_number == 2


def test_task_spec_round_trip() -> None:
    spec = TaskSpec(
        table="a b", format="sql", compression="zstd", part_rows=1000, base_name="a_b-1234",
        format_options={"dialect": "sqlite", "primary_key": ["id"], "rows_per_insert": 10},
        min_part_bytes=5 * 2**20, max_file_size=10**9, columns=("id", "v"),
    )
    back = TaskSpec.from_json(through_json(spec.to_json()))
    assert back == spec and isinstance(back.columns, tuple)
    plain = TaskSpec(table="t", format="csv", compression="none", part_rows=1, base_name="t")
    assert TaskSpec.from_json(through_json(plain.to_json())) == plain

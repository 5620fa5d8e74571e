"""Rewinding an open file to the last part the sink agrees on, and CRC32C arithmetic."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import google_crc32c
import pytest

import egress
from egress.domain.checkpoint import Checkpoint, FileRecord, OpenFile, PartRecord
from egress.domain.crc import crc32c_base64, crc32c_combine, crc32c_concat
from egress.engine.resume import rewind_open_file, verify_open_file
from egress.sinks.local import LocalSink
from staging import staged_copy


def test_crc32c_combine_matches_computing_over_the_bytes() -> None:
    rnd = random.Random(3)
    for _ in range(300):
        a, b = rnd.randbytes(rnd.randint(0, 5000)), rnd.randbytes(rnd.randint(0, 5000))
        assert crc32c_combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == (
            google_crc32c.value(a + b)
        )
    pieces = [rnd.randbytes(rnd.randint(0, 900)) for _ in range(12)]
    assert crc32c_concat((google_crc32c.value(p), len(p)) for p in pieces) == (
        google_crc32c.value(b"".join(pieces))
    )
    assert crc32c_base64(google_crc32c.value(b"123456789")) == "4waSgw=="  # 0xE3069283


DATA = [b"header+rows 1-10|", b"rows 11-20|", b"rows 21-30|", b"rows 31-35+footer"]


def _checkpoint() -> Checkpoint:
    """A finished first file, then an open second file of four parts."""
    parts = tuple(
        PartRecord(number=n, rows=10, size=len(d), crc32c=google_crc32c.value(d),
                   etag=f'"e{n}"', last_key=(100 + 10 * n,))
        for n, d in enumerate(DATA, 1)
    )
    first = FileRecord(name="t-00001.csv", rows=100, size=500, crc32c=7, sha256=None,
                       parts=2, first_key=(1,), last_key=(100,))
    of = OpenFile(index=2, name="t-00002.csv", parts=parts, rows=40,
                  size=sum(map(len, DATA)), crc32c=google_crc32c.value(b"".join(DATA)),
                  first_key=(101,), sink_state={"upload_id": "u"}, closed=True, last=True)
    return Checkpoint(cursor=(140,), rows=140, bytes=500 + of.size, open_file=of,
                      files=(first,), next_file_index=3)


def test_rewind_to_an_agreed_part_keeps_the_parts_before_it() -> None:
    cp = rewind_open_file(_checkpoint(), 2)
    of = cp.open_file
    assert of is not None and [p.number for p in of.parts] == [1, 2]
    assert cp.cursor == (120,) and cp.rows == 120 and of.rows == 20
    assert of.size == len(DATA[0] + DATA[1]) and cp.bytes == 500 + of.size
    assert of.crc32c == google_crc32c.value(DATA[0] + DATA[1])
    assert not of.closed and not of.last and of.sink_state == {"upload_id": "u"}
    assert of.next_part_number == 3 and cp.next_file_index == 3


def test_rewind_with_nothing_agreed_restarts_the_file() -> None:
    cp = rewind_open_file(_checkpoint(), 0)
    assert cp.open_file is None and cp.cursor == (100,)  # the previous file's last key
    assert cp.rows == 100 and cp.bytes == 500 and cp.next_file_index == 2
    assert len(cp.files) == 1 and not cp.done
    # the abandoned attempt is remembered (a late complete of it is this file), durably
    assert cp.restarted_from == ({"upload_id": "u"},)
    assert Checkpoint.from_json(cp.to_json()) == cp
    again = rewind_open_file(cp.evolve(open_file=_checkpoint().open_file), 0)
    assert again.restarted_from == ({"upload_id": "u"}, {"upload_id": "u"})


def test_a_part_without_its_key_rewinds_to_the_file_start() -> None:
    cp = _checkpoint()
    assert cp.open_file is not None
    old = cp.open_file.parts
    keyless = PartRecord(2, 10, old[1].size, old[1].crc32c, None)
    of = OpenFile(**{**cp.open_file.__dict__, "parts": (old[0], keyless, *old[2:])})
    assert rewind_open_file(cp.evolve(open_file=of), 2).open_file is None


def _db(path: Path) -> str:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?)",
                       [(i, f"value {i}" * 3) for i in range(400)])
    return f"sqlite:///{path}"


class _StopAfter:
    def __init__(self, n: int) -> None:
        self.n, self.commits = n, 0

    def table_started(self, *args: object) -> None: ...
    def table_done(self, *args: object) -> None: ...

    def advanced(self, *args: object) -> None:
        self.commits += 1

    def __call__(self) -> bool:
        return self.commits >= self.n


@pytest.mark.parametrize("keep_bytes", [0, 1])
def test_a_local_staged_file_cut_short_is_repaired_on_resume(
    tmp_path: Path, keep_bytes: int
) -> None:
    source = _db(tmp_path / "db.sqlite")
    opts = dict(format="csv", compression="gzip", part_rows=30, fsync=False)
    egress.export(source, ["t"], to=tmp_path / "ref", **opts)
    stop = _StopAfter(6)
    egress.export(source, ["t"], to=tmp_path / "out", progress=stop, should_stop=stop, **opts)
    staged = staged_copy(tmp_path / "out", "t.csv.gz")  # sealed: the run stopped cleanly
    state = json.loads((tmp_path / "out" / ".egress" / "state.json").read_text())
    first = state["tasks"]["t"]["checkpoint"]["open_file"]["parts"][0]["size"]
    with open(staged, "r+b") as f:  # lose everything after the first part (or all)
        f.truncate(first + 5 if keep_bytes else 0)
    egress.export(source, ["t"], to=tmp_path / "out", resume=True, **opts)
    out, ref = tmp_path / "out" / "t.csv.gz", tmp_path / "ref" / "t.csv.gz"
    assert out.read_bytes() == ref.read_bytes()


def test_verify_open_file_commits_the_rewound_checkpoint(tmp_path: Path) -> None:
    sink = LocalSink(tmp_path, fsync=False)
    cp = _checkpoint()
    assert cp.open_file is not None
    sink.start_file(cp.open_file.name)
    sink.put_part(cp.open_file.name, {}, 1, 0, DATA[0] + DATA[1] + b"x")  # 2 parts and a bit
    commits: list[Checkpoint] = []
    new = verify_open_file(sink, commits.append, cp)
    assert commits == [new] and new.open_file is not None and len(new.open_file.parts) == 2
    assert verify_open_file(sink, commits.append, new) is new and len(commits) == 1

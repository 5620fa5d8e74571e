"""LocalSink: parts at offsets, replace on rewrite, atomic and idempotent completion."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import google_crc32c
import pytest

from egress.domain.checkpoint import PartRecord
from egress.exceptions import SinkError
from egress.sinks.local import LocalSink
from staging import staged_copies


def sink(tmp_path: Path) -> LocalSink:
    return LocalSink(tmp_path / "out", fsync=False)


def part(number: int, size: int) -> PartRecord:
    return PartRecord(number=number, rows=1, size=size, crc32c=0)


def test_parts_complete_into_the_final_file(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    s.put_part("t.csv", state, 2, 3, b"defg")
    assert not s.exists("t.csv")  # no partial file under the final name
    sha = s.complete_file("t.csv", state, 7, [part(1, 3), part(2, 4)])
    assert (s.root / "t.csv").read_bytes() == b"abcdefg"
    assert sha == hashlib.sha256(b"abcdefg").hexdigest()
    assert not list((s.root / ".egress" / "staging").iterdir())


def test_rewriting_a_part_replaces_it(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    s.put_part("t.csv", state, 2, 3, b"XXXXXXXX")  # never committed
    s.put_part("t.csv", state, 2, 3, b"def")  # the next owner writes part 2 again
    s.put_part("t.csv", state, 3, 6, b"gh")
    s.complete_file("t.csv", state, 8, [part(1, 3), part(2, 3), part(3, 2)])
    assert (s.root / "t.csv").read_bytes() == b"abcdefgh"


def test_completion_drops_bytes_of_an_uncommitted_part(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    s.put_part("t.csv", state, 2, 3, b"uncommitted")
    s.complete_file("t.csv", state, 3, [part(1, 3)])
    assert (s.root / "t.csv").read_bytes() == b"abc"


def test_completion_is_idempotent(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("d/part-00001.parquet")
    s.put_part("d/part-00001.parquet", state, 1, 0, b"data")
    first = s.complete_file("d/part-00001.parquet", state, 4, [part(1, 4)])
    again = s.complete_file("d/part-00001.parquet", state, 4, [part(1, 4)])
    assert first == again
    assert (s.root / "d" / "part-00001.parquet").read_bytes() == b"data"


def test_completion_refuses_missing_or_short_files(tmp_path: Path) -> None:
    s = sink(tmp_path)
    with pytest.raises(SinkError, match="neither a staged nor a final file"):
        s.complete_file("missing.csv", {}, 3, [])
    state = s.start_file("short.csv")
    s.put_part("short.csv", state, 1, 0, b"ab")
    with pytest.raises(SinkError, match="holds 2 bytes, expected 5"):
        s.complete_file("short.csv", state, 5, [part(1, 5)])


def test_a_gap_before_a_part_is_refused(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    with pytest.raises(SinkError, match="holds 3 bytes but 10 were committed"):
        s.put_part("t.csv", state, 2, 10, b"x")


@pytest.mark.parametrize("name", ["../escape.csv", "/etc/passwd", "a/../../escape.csv"])
def test_names_outside_the_root_are_refused(tmp_path: Path, name: str) -> None:
    s = sink(tmp_path)
    with pytest.raises(SinkError, match="outside the output directory"):
        s.start_file(name)
    with pytest.raises(SinkError, match="outside the output directory"):
        s.put_object(name, b"x")
    assert not (tmp_path / "escape.csv").exists()


def test_put_object_is_atomic_and_replaces(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.put_object("manifest.json", b"{}")
    s.put_object("manifest.json", b'{"a": 1}')
    assert s.get_object("manifest.json") == b'{"a": 1}'
    assert sorted(p.name for p in s.root.iterdir()) == [".egress", "manifest.json"]
    s.delete("manifest.json")
    assert not s.exists("manifest.json")


def test_abort_drops_the_staged_file(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    s.abort_file("t.csv", state)
    assert not list((s.root / ".egress" / "staging").iterdir())
    assert not s.exists("t.csv")


def test_verify_parts_counts_the_parts_the_staged_file_holds(tmp_path: Path) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    s.put_part("t.csv", state, 2, 3, b"de")
    parts = [part(1, 3), part(2, 2), part(3, 4)]
    assert s.verify_parts("t.csv", state, parts) == 2
    s.complete_file("t.csv", state, 5, parts[:2])
    assert s.verify_parts("t.csv", state, parts[:2]) == 2  # final: all of them


def test_a_file_written_in_order_is_not_read_back_for_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    data = [bytes([i]) * (5000 + i) for i in range(5)]
    offset = 0
    for number, chunk in enumerate(data, start=1):
        s.put_part("t.csv", state, number, offset, chunk)
        offset += len(chunk)

    def no_reading(path: Path) -> str:
        raise AssertionError(f"{path} was read back")

    monkeypatch.setattr("egress.sinks.local.sha256_file", no_reading)
    sha = s.complete_file("t.csv", state, offset, [part(i + 1, len(c)) for i, c in enumerate(data)])
    assert sha == hashlib.sha256(b"".join(data)).hexdigest()


def test_a_part_is_hashed_by_the_time_it_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sink's thread holds no part's bytes past its commit: they are an export's memory
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    updates: list[bytes] = []
    real = hashlib.sha256

    class Recording:
        def __init__(self) -> None:
            self._h = real()

        def update(self, data: bytes) -> None:
            time.sleep(0.05)  # slower than the write
            updates.append(bytes(data))
            self._h.update(data)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr("egress.sinks.local.hashlib.sha256", Recording)
    s.put_part("t.csv", state, 1, 0, b"abc")
    assert updates == [b"abc"]  # hashed before put_part returned
    s.put_part("t.csv", state, 2, 3, b"def")
    assert updates == [b"abc", b"def"]
    assert s.complete_file("t.csv", state, 6, [part(1, 3), part(2, 3)]) == \
        real(b"abcdef").hexdigest()


def test_a_part_that_failed_to_write_is_not_counted_in_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = sink(tmp_path)
    state = s.start_file("t.csv")
    s.put_part("t.csv", state, 1, 0, b"abc")
    def failing(*args: object) -> None:
        raise SinkError("disk full")

    monkeypatch.setattr(LocalSink, "_write_part", failing)
    with pytest.raises(SinkError):
        s.put_part("t.csv", state, 2, 3, b"XYZ")
    monkeypatch.undo()
    s.put_part("t.csv", state, 2, 3, b"def")  # the retry
    sha = s.complete_file("t.csv", state, 6, [part(1, 3), part(2, 3)])
    assert (s.root / "t.csv").read_bytes() == b"abcdef"
    assert sha == hashlib.sha256(b"abcdef").hexdigest()


@pytest.mark.parametrize("case", ["another sink", "uncommitted tail", "rewrite"])
def test_a_digest_this_sink_cannot_vouch_for_is_read_from_the_file(
    tmp_path: Path, case: str
) -> None:
    first = sink(tmp_path)
    state = first.start_file("t.csv")
    first.put_part("t.csv", state, 1, 0, b"abc")
    if case == "another sink":
        first.release()  # a clean end of its slice: the next writer adopts its copy
    second = sink(tmp_path) if case == "another sink" else first
    second.put_part("t.csv", state, 2, 3, b"XYZ" if case == "rewrite" else b"def")
    if case == "rewrite":  # the last part again, other bytes (a replay after a crash)
        second.put_part("t.csv", state, 2, 3, b"def")
    if case == "uncommitted tail":
        second.put_part("t.csv", state, 3, 6, b"never committed")
    sha = second.complete_file("t.csv", state, 6, [part(1, 3), part(2, 3)])
    assert (second.root / "t.csv").read_bytes() == b"abcdef"
    assert sha == hashlib.sha256(b"abcdef").hexdigest()


def crc_part(number: int, data: bytes) -> PartRecord:
    return PartRecord(number=number, rows=1, size=len(data), crc32c=google_crc32c.value(data))


def test_a_writer_that_lost_its_task_writes_into_no_one_elses_bytes(tmp_path: Path) -> None:
    """A zombie frozen between the fence and its write (SIGSTOP) wakes and writes other
    bytes (its rows changed meanwhile) where the new owner already wrote: only its own
    staged copy gets them, and once the file is complete it writes nothing at all."""
    zombie = sink(tmp_path)
    state = zombie.start_file("t.csv")
    zombie.put_part("t.csv", state, 1, 0, b"abc")  # committed; then the zombie freezes
    owner = sink(tmp_path)
    p1, p2 = crc_part(1, b"abc"), crc_part(2, b"def")
    assert owner.verify_parts("t.csv", state, [p1]) == 1
    owner.put_part("t.csv", state, 2, 3, b"def")  # takes the committed bytes over
    zombie.put_part("t.csv", state, 2, 3, b"XYZ!!")  # wakes: into its own copy
    assert len(staged_copies(tmp_path / "out", "t.csv")) == 2
    sha = owner.complete_file("t.csv", state, 6, [p1, p2])
    assert (owner.root / "t.csv").read_bytes() == b"abcdef"
    assert sha == hashlib.sha256(b"abcdef").hexdigest()
    assert staged_copies(tmp_path / "out", "t.csv") == []  # the zombie's copy is gone
    with pytest.raises(SinkError, match="another writer completed or removed this file"):
        zombie.put_part("t.csv", state, 3, 8, b"late")
    assert staged_copies(tmp_path / "out", "t.csv") == []
    assert (owner.root / "t.csv").read_bytes() == b"abcdef"


def test_a_sealed_copy_is_adopted_without_copying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = sink(tmp_path)
    state = first.start_file("t.csv")
    first.put_part("t.csv", state, 1, 0, b"abc")
    first.release()
    [sealed] = staged_copies(tmp_path / "out", "t.csv")
    assert sealed.name.endswith("~at-3")

    def no_copy(*args: object) -> int:
        raise AssertionError("a sealed copy was copied")

    monkeypatch.setattr("egress.sinks.staged._copy_prefix", no_copy)
    second = sink(tmp_path)
    assert second.verify_parts("t.csv", state, [crc_part(1, b"abc")]) == 1
    second.put_part("t.csv", state, 2, 3, b"def")
    second.complete_file("t.csv", state, 6, [crc_part(1, b"abc"), crc_part(2, b"def")])
    assert (second.root / "t.csv").read_bytes() == b"abcdef"


def test_a_copy_without_the_committed_bytes_is_not_taken_over(tmp_path: Path) -> None:
    first = sink(tmp_path)
    state = first.start_file("t.csv")
    first.put_part("t.csv", state, 1, 0, b"abc")
    [copy] = staged_copies(tmp_path / "out", "t.csv")
    copy.write_bytes(b"abX")  # changed outside egress
    second = sink(tmp_path)
    assert second.verify_parts("t.csv", state, [crc_part(1, b"abc")]) == 1  # sizes only
    with pytest.raises(SinkError, match="holds its 3 committed bytes"):
        second.put_part("t.csv", state, 2, 3, b"def")
    assert staged_copies(tmp_path / "out", "t.csv") == [copy]


def test_completing_again_after_a_crash_ignores_a_zombies_leftover_copy(tmp_path: Path) -> None:
    """The file was renamed into place, then the process died before the checkpoint said
    so; a zombie's copy with bytes it never committed is still there. Completing again
    finds the final file, leaves it alone and removes the copy."""
    owner = sink(tmp_path)
    state = owner.start_file("t.csv")
    owner.put_part("t.csv", state, 1, 0, b"abcdef")
    owner.complete_file("t.csv", state, 6, [crc_part(1, b"abcdef")])
    zombie_copy = tmp_path / "out" / ".egress" / "staging" / f"t.csv~{state['id']}~zombie"
    zombie_copy.write_bytes(b"XXXXXXXXXX")
    again = sink(tmp_path)
    sha = again.complete_file("t.csv", state, 6, [crc_part(1, b"abcdef")])
    assert sha == hashlib.sha256(b"abcdef").hexdigest()
    assert (again.root / "t.csv").read_bytes() == b"abcdef"
    assert staged_copies(tmp_path / "out", "t.csv") == []


KILLED_MID_WRITE = """
import os, sys
from egress.sinks.local import LocalSink
os.fsync = lambda fd: os._exit(9)  # SIGKILL-like: no cleanup code runs after this
sink = LocalSink(sys.argv[1], fsync=True)
if sys.argv[2] == "stitch":
    sink.stitch_file("t.csv", [("a", 3), ("b", 3)], b"!", 7)
else:
    sink.put_object("manifest.json", b'{"files": []}')
"""


@pytest.mark.parametrize("how", ["put", "replace", "stitch"])
def test_a_writer_killed_mid_write_leaves_no_file(tmp_path: Path, how: str) -> None:
    """Files written whole (the manifest, a stitched file) have no name until they are
    complete: a process killed before that leaves nothing behind, not even in the
    staging area (only the old file, when it was to be replaced)."""
    import subprocess
    import sys

    root = tmp_path / "out"
    root.mkdir()
    (root / "a").write_bytes(b"abc")
    (root / "b").write_bytes(b"def")
    if how == "replace":
        (root / "manifest.json").write_bytes(b"old")
    before = sorted(p.name for p in root.rglob("*") if p.is_file())
    done = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(root),
                           "stitch" if how == "stitch" else "put"], capture_output=True)
    assert done.returncode == 9, done.stderr
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == before
    if how == "replace":
        assert (root / "manifest.json").read_bytes() == b"old"


def test_files_written_whole_take_their_name_complete(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With unnamed files and without (a file system lacking O_TMPFILE): the object is
    written, a file already there is replaced, and no staging file is left."""
    import errno
    import os

    s = sink(tmp_path)
    s.put_object("m.json", b"one")
    s.put_object("m.json", b"two")  # replaces
    assert (s.root / "m.json").read_bytes() == b"two"
    real_open = os.open

    def no_tmpfile(path: object, flags: int, *args: object) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "no unnamed files here")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_tmpfile)
    s.put_object("m.json", b"three")
    s.put_object("n.json", b"four")
    assert (s.root / "m.json").read_bytes() == b"three"
    assert (s.root / "n.json").read_bytes() == b"four"
    assert sorted(p.name for p in s.root.rglob("*") if p.is_file()) == ["m.json", "n.json"]

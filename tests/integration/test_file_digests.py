"""Every file's SHA-256 comes from the digest state carried in the checkpoint: a file
finished by a resumed run (a new process, a new sink) is not read back to be hashed."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from pathlib import Path

import pytest

import egress


def _db(path: Path) -> str:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        rnd = random.Random(9)  # hex of random bytes: it does not compress away
        db.executemany("INSERT INTO t VALUES (?, ?)",
                       [(i, rnd.randbytes(40).hex()) for i in range(900)])
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


def test_a_resumed_local_file_is_hashed_from_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _db(tmp_path / "db.sqlite")
    opts = dict(format="csv", compression="gzip", part_rows=50, max_file_size=20_000,
                fsync=False)
    stop = _StopAfter(5)
    first = egress.export(source, ["t"], to=tmp_path / "out", progress=stop, should_stop=stop,
                          **opts)
    assert first.interrupted

    def no_reading(path: Path) -> str:
        raise AssertionError(f"{path} was read back to be hashed")

    monkeypatch.setattr("egress.sinks.local.sha256_file", no_reading)
    egress.export(source, ["t"], to=tmp_path / "out", resume=True, **opts)
    files = json.loads((tmp_path / "out" / "manifest.json").read_text())["files"]
    assert len(files) >= 2  # the first file was open when the first run stopped
    for f in files:
        data = (tmp_path / "out" / f["name"]).read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest(), f["name"]


def test_without_libcrypto_each_file_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("egress.domain.sha256.available", lambda: False)
    source = _db(tmp_path / "db.sqlite")
    egress.export(source, ["t"], to=tmp_path / "out", format="csv", part_rows=50,
                  max_file_size=20_000, fsync=False)
    files = json.loads((tmp_path / "out" / "manifest.json").read_text())["files"]
    for f in files:
        data = (tmp_path / "out" / f["name"]).read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest(), f["name"]

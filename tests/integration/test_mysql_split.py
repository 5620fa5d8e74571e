"""A split MariaDB table exported by several ``egress worker`` processes (real MariaDB):
the rows of its files, read in manifest order, are the unsplit export's, row by row,
every key once; boundaries strictly increase in the column's order (its collation for a
utf8mb4 text key) and a skewed integer key gives ranges of similar counts."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from egress.domain.jobs import ExportState
from egress.domain.predicate import Predicate
from egress.engine.split import plan_ranges
from egress.manager import ExportRequest, create_export, export_root
from egress.sources.mysql import MySqlSource
from egress.store.sql import SqlJobStore
from jobsharness import drain_with_workers, write_home
from mariadbserver import MariaDbServer
from splitharness import rows_of, skewed_ids

pytestmark = pytest.mark.mariadb

WORKER = {"concurrency": 1, "heartbeat_seconds": 0.3, "reconcile_seconds": 0.3,
          "poll_seconds": 0.1, "backoff_seconds": 0.2, "max_attempts": 20,
          "slice_seconds": 1.0}
ROWS = 20_000
#: First-key values that a case- and accent-insensitive, PAD SPACE collation
#: (utf8mb4_unicode_ci) holds equal to each other in groups, and 4-byte characters.
LETTERS = ["a", "A", "ä", "b", "B", "é", "E", "ss", "ß", "z", "😀", "Ω"]


def _insert(server: MariaDbServer, url: str, sql: str, rows: list[tuple[Any, ...]]) -> None:
    conn: Any = server.connect(urlsplit(url).path.lstrip("/"))
    try:
        with conn.cursor() as cur:
            for i in range(0, len(rows), 2000):
                cur.executemany(sql, rows[i:i + 2000])
    finally:
        conn.close()


def mariadb_source(server: MariaDbServer, url: str) -> str:
    """``events``: a skewed BIGINT key; ``pairs``: a (VARCHAR utf8mb4_unicode_ci, INT) key
    whose first column repeats, in collation-equal spellings; ``words``: a one-column
    VARCHAR utf8mb4_unicode_ci key."""
    server.execute(
        "CREATE TABLE events (id BIGINT PRIMARY KEY, kind VARCHAR(20), "
        "amount DECIMAL(10,2), at DATETIME(6) NOT NULL)",
        "CREATE TABLE pairs (name VARCHAR(40) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_ci NOT NULL, n INT NOT NULL, note VARCHAR(20), "
        "PRIMARY KEY (name, n))",
        "CREATE TABLE words (w VARCHAR(40) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_ci PRIMARY KEY, n INT NOT NULL)",
        database=urlsplit(url).path.lstrip("/"))
    _insert(server, url, "INSERT INTO events VALUES (%s, %s, %s, %s)", [
        (i, f"k{i % 7}, \"q\"", f"{i % 1000}.25", f"2024-01-01 00:00:{i % 60:02d}.5")
        for i in skewed_ids(ROWS, 11)])
    rng = random.Random(5)
    pairs = []
    for n in range(ROWS // 2):
        letter = rng.choice(LETTERS)
        pad = " " if n % 9 == 0 else ""  # equal to the unpadded name in a PAD SPACE collation
        pairs.append((f"{letter}{rng.randrange(150):03d}{pad}", n, f"n{n}"))
    _insert(server, url, "INSERT INTO pairs VALUES (%s, %s, %s)", pairs)
    # one-column text key: case and accent variants sort together in the collation
    _insert(server, url, "INSERT INTO words VALUES (%s, %s)", [
        (f"{LETTERS[n % len(LETTERS)]}{rng.randrange(10**6):06d}-{n}", n)
        for n in range(ROWS // 2)])
    return url


def run_split_and_whole(tmp_path: Path, source: str, table: str, fmt: str, split: int,
                        split_files: bool = True, compression: str | None = None,
                        ) -> tuple[Any, Any, Any, list[Any]]:
    settings = write_home(tmp_path / "home",
                          store_url=f"sqlite:///{tmp_path / 'home' / 'egress.db'}",
                          sources={"main": source}, worker=WORKER)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        made, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, compression=compression,
            options={"split": split, "split_files": split_files, "part_rows": 1500}))
        whole, _ = create_export(store, settings, ExportRequest(
            source="main", tables=(table,), format=fmt, compression=compression,
            options={"part_rows": 1500}))
        # one task until a worker claims it and plans the ranges (engine/split.py)
        assert [t.key_range for t in store.task_list(made.id)] == [None]
        drain_with_workers(settings.home, 3, tmp_path / "workers.log", timeout=50)
        ranges = [t.key_range for t in store.task_list(made.id)]
        assert [r["index"] for r in ranges] == list(range(split)), ranges
        made, whole = store.export_get(None, made.id), store.export_get(None, whole.id)
        assert made.state is ExportState.COMPLETED, made.error_detail
        assert whole.state is ExportState.COMPLETED, whole.error_detail
        return settings, made, whole, ranges
    finally:
        store.close()


def check_same_rows(settings: Any, split: Any, whole: Any, fmt: str, count: int,
                    key_width: int) -> list[int]:
    manifest = split.manifest
    names = [f["name"] for f in manifest["files"]]
    assert names == sorted(names) and len(names) >= count  # each range its own files
    (entry,) = manifest["tables"]
    assert [r["range"] for r in entry["split"]] == list(range(1, count + 1))
    counts = [r["rows"] for r in entry["split"]]
    assert sum(counts) == entry["rows"]
    # a range (lo, hi] with rows has lo < hi in the server's order: boundaries increase
    assert min(counts) > 0, counts
    got = rows_of(export_root(settings, split), names, fmt)
    want = rows_of(export_root(settings, whole), [f["name"] for f in whole.manifest["files"]],
                   fmt)
    assert len(got) == len(want) == entry["rows"]
    assert got == want
    keys = [row[:key_width] for row in got]
    assert len(set(keys)) == len(keys)
    return counts


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_mariadb_split_on_a_skewed_integer_key(tmp_path: Path, mariadb_server: MariaDbServer,
                                               mariadb_url: str, fmt: str) -> None:
    source = mariadb_source(mariadb_server, mariadb_url)
    settings, split, whole, ranges = run_split_and_whole(tmp_path, source, "events", fmt, 4)
    counts = check_same_rows(settings, split, whole, fmt, 4, 1)
    assert max(counts) <= 1.2 * min(counts), counts  # skewed key, similar counts
    his = [r["hi"] for r in ranges[:-1]]
    bounds = [int(v[1]) for v in his]  # ["int", "…"]: the cursor's own type
    assert [v[0] for v in his] == ["int"] * 3 and bounds == sorted(set(bounds)), bounds
    assert [r["lo"] for r in ranges[1:]] == his
    assert bounds[-1] < ROWS * 4 // 5 < bounds[-1] * 2  # quantiles, not min/max cuts
    assert split.manifest["tables"][0]["rows"] == ROWS


def test_mariadb_split_on_a_composite_utf8mb4_key(tmp_path: Path,
                                                  mariadb_server: MariaDbServer,
                                                  mariadb_url: str) -> None:
    source = mariadb_source(mariadb_server, mariadb_url)
    settings, split, whole, ranges = run_split_and_whole(tmp_path, source, "pairs", "jsonl", 3)
    counts = check_same_rows(settings, split, whole, "jsonl", 3, 2)
    assert max(counts) <= 1.5 * min(counts), counts
    assert sum(counts) == ROWS // 2
    assert all(r["hi"][0] == "str" for r in ranges[:-1]) and ranges[0]["column"] == "name"


@pytest.mark.parametrize("table,fmt,compression", [("events", "csv", "gzip"),
                                                   ("events", "parquet", None),
                                                   ("words", "jsonl", "zstd")])
def test_mariadb_stitched_split_is_byte_identical(tmp_path: Path,
                                                  mariadb_server: MariaDbServer,
                                                  mariadb_url: str, table: str, fmt: str,
                                                  compression: str | None) -> None:
    """One file, the bytes of the unsplit export: ranges cut at exact row numbers in
    the key's order (its collation for a utf8mb4 text key)."""
    source = mariadb_source(mariadb_server, mariadb_url)
    settings, split, whole, ranges = run_split_and_whole(
        tmp_path, source, table, fmt, 4, split_files=False, compression=compression)
    assert [r["index"] for r in ranges] == [0, 1, 2, 3]
    (got,), (want,) = split.manifest["files"], whole.manifest["files"]
    assert got["name"] == want["name"]
    for key in ("rows", "bytes", "crc32c", "sha256", "first_key", "last_key"):
        assert got[key] == want[key], key
    assert (export_root(settings, split) / got["name"]).read_bytes() == (
        export_root(settings, whole) / want["name"]).read_bytes()
    counts = [r["rows"] for r in split.manifest["tables"][0]["split"]]
    assert sum(counts) == got["rows"] and max(counts) <= 2 * min(counts), counts


def test_mariadb_boundaries_follow_the_collation(mariadb_server: MariaDbServer,
                                                 mariadb_url: str) -> None:
    """Boundaries strictly increase in the column's collation (collation-equal
    spellings collapse), and the range reads with a filter cover each row once."""
    from egress.domain.predicate import Condition

    source = MySqlSource(mariadb_source(mariadb_server, mariadb_url))
    try:
        info = source.describe("pairs")
        ranges = plan_ranges(source, info, 8, 10)
        assert ranges is not None and 2 <= len(ranges) <= 8
        his = [r.hi for r in ranges[:-1]]
        conn: Any = mariadb_server.connect(urlsplit(mariadb_url).path.lstrip("/"))
        try:
            with conn.cursor() as cur:
                for a, b in itertools.pairwise(his):
                    cur.execute("SELECT %s COLLATE utf8mb4_unicode_ci < "
                                "%s COLLATE utf8mb4_unicode_ci", (a, b))
                    assert cur.fetchone()[0] == 1, (a, b)
        finally:
            conn.close()

        def read(predicate: Predicate | None, table: Any = info) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            after = None
            while True:
                page = [r for b in source.read(table, after, 700, predicate=predicate)
                        for r in b.to_pylist()]
                if not page:
                    return out
                out += page
                after = tuple(page[-1][k] for k in table.key_columns)

        whole = read(None)
        assert [r for rng in ranges for r in read(Predicate((), rng))] == whole
        odd = Condition("n", ">", 5000)
        assert [r for rng in ranges for r in read(Predicate((odd,), rng))] == \
            [r for r in whole if r["n"] > 5000]
        assert len({(r["name"], r["n"]) for r in whole}) == len(whole) == ROWS // 2
        # six rows, three first-key values in the collation, six ranges asked: the
        # collation-equal repeats collapse (Python's == would keep 'a', 'A' and 'á')
        mariadb_server.execute("CREATE TABLE few (k VARCHAR(5) COLLATE utf8mb4_unicode_ci "
                               "NOT NULL, n INT NOT NULL, PRIMARY KEY (k, n))",
                               "INSERT INTO few VALUES ('a', 1), ('A', 2), ('á', 3), "
                               "('b', 4), ('B', 5), ('c', 6)",
                               database=urlsplit(mariadb_url).path.lstrip("/"))
        few_info = source.describe("few")
        few = plan_ranges(source, few_info, 6, 1)
        assert few is not None and len(few) == 3, few
        assert few[0].hi in ("a", "A", "á") and few[1].hi in ("b", "B")
        assert [[r["n"] for r in read(Predicate((), r), few_info)] for r in few] == \
            [[1, 2, 3], [4, 5], [6]]
    finally:
        source.close()

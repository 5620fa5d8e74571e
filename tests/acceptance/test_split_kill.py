"""A split export survives SIGKILLs: a 200k-row table with a skewed key, split 4 ways and
run by 3 worker processes, random workers SIGKILLed at seeded moments (a bounded number,
then the workers finish). Its files are byte-identical to an uninterrupted run of the
same split plan, its rows (read in manifest order) are the unsplit export's, row by row,
and the lease log shows no task with two live leases."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import (
    check_leases,
    drain_with_workers,
    export_outputs,
    run_with_kills,
    write_home,
)
from splitharness import pg_source, rows_of, sqlite_source

pytestmark = pytest.mark.slow

ROWS = 200_000
KILLS = 6
WORKER = {"concurrency": 1, "lease_seconds": 3.0, "heartbeat_seconds": 0.5,
          "slice_seconds": 1.0, "reconcile_seconds": 0.5, "poll_seconds": 0.1,
          "backoff_seconds": 0.2, "max_attempts": 30}


@pytest.mark.parametrize("kind,fmt,comp", [
    ("sqlite", "csv", "gzip"),
    pytest.param("postgresql", "parquet", None, marks=pytest.mark.postgres),
])
def test_split_export_with_kills_is_byte_identical(tmp_path: Path, pg_server: Any, kind: str,
                                                   fmt: str, comp: str | None) -> None:
    rng = random.Random(f"split-kill-{kind}")
    if kind == "sqlite":
        source = sqlite_source(tmp_path / "source.db", rows=ROWS)
        store_url = f"sqlite:///{tmp_path / 'home' / 'egress.db'}"
    else:
        suffix = rng.randrange(10**9)
        source = pg_source(pg_server, f"split_kill_src_{suffix}", rows=ROWS)
        store_url = pg_server.create_database(f"split_kill_store_{suffix}")
    # each reading worker at most 20k rows/s: the killed run lasts several seconds on any
    # machine, so the kills land while ranges run (a fast machine once finished first)
    settings = write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
                          worker=WORKER,
                          source_limits={"main": {"max_rows_per_second": 20_000}})
    store = SqlJobStore(store_url)
    try:
        store.migrate()

        def create(options: dict[str, Any]) -> Any:
            return create_export(store, settings, ExportRequest(
                source="main", tables=("events",), format=fmt, compression=comp,
                options={"part_rows": 2500, **options}))[0]

        killed = create({"split": 4, "split_files": True})
        log = tmp_path / "workers.log"
        kills = run_with_kills(store, killed.id, settings.home, log, workers=3,
                               kills=KILLS, rng=rng, seconds=80)
        assert kills >= 3, f"only {kills} kills happened before the export finished"
        state = store.export_get(None, killed.id)
        assert state.state is ExportState.COMPLETED, (state.error_detail,
                                                      log.read_text()[-3000:])

        calm, whole = create({"split": 4, "split_files": True}), create({})
        drain_with_workers(settings.home, 3, log, timeout=80)
        killed, calm, whole = (store.export_get(None, e.id) for e in (killed, calm, whole))
        for e in (killed, calm, whole):
            assert e.state is ExportState.COMPLETED, e.error_detail
        ranges = [[t.key_range for t in store.task_list(e.id)] for e in (killed, calm)]
        assert ranges[0] == ranges[1]  # one table, one plan
        outputs = export_outputs(settings, killed), export_outputs(settings, calm)
        assert outputs[0] == outputs[1], (outputs, [t.checkpoint for t in store.task_list(
            killed.id)])
        names = [f["name"] for f in killed.manifest["files"]]
        got = rows_of(export_root(settings, killed), names, fmt)
        want = rows_of(export_root(settings, whole), [f["name"] for f in whole.manifest["files"]],
                       fmt)
        assert len(got) == ROWS and got == want
        counts = [r["rows"] for r in killed.manifest["tables"][0]["split"]]
        assert max(counts) <= 2 * min(counts), counts
        assert check_leases(store.lease_events()) == []
        print(f"split {kind}: {kills} kills, ranges {counts}")
    finally:
        store.close()

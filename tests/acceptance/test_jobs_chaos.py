"""Chaos: worker processes SIGKILLed every 0.5–1.2 s while 20 exports run (issue 3); KILLS
kills must land before the exports are done, then the workers finish them.

Every export must complete with files byte-identical to an uninterrupted in-process run
of the same plan, and the lease log must show that no task ever had two live leases.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export
from egress.store.sql import SqlJobStore
from jobsharness import (
    all_terminal,
    check_leases,
    export_outputs,
    make_events_db,
    reference_outputs,
    start_worker,
    stop,
    write_home,
)

pytestmark = pytest.mark.slow

FORMATS = [
    ("csv", "gzip"), ("jsonl", "none"), ("json", "zstd"), ("sql", "gzip"), ("parquet", "none"),
    ("csv", "none"), ("jsonl", "gzip"),
]
PART_ROWS = 300
KILLS = 30


# about a million rows in 300-row parts (~3,300 commits): long enough for well over KILLS
# kills 0.5–1.2 s apart (an unloaded machine finishes PostgreSQL's in ~45 s: at 1–2 s
# apart that was 27 kills), short enough for CI (it was 2.5M rows: 6–8 min)
SIZES = {f"t{i:02d}": n for i, n in enumerate(
    random.Random("chaos-tables").randint(20_000, 80_000) for _ in range(20))}


def table_format(i: int) -> tuple[str, str]:
    return FORMATS[i % len(FORMATS)]


@pytest.fixture(scope="module")
def chaos_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[str, str]]]:
    """The source both stores' runs export, and the files an uninterrupted in-process run
    of each table's plan writes (made once: ~30 CPU seconds, a tenth of a run)."""
    tmp = tmp_path_factory.mktemp("chaos-source")
    source = make_events_db(tmp / "source.db", SIZES)
    references = {}
    for i, table in enumerate(SIZES):
        fmt, comp = table_format(i)
        references[table] = reference_outputs(source, table, fmt, comp, PART_ROWS,
                                              tmp / "ref" / table)
    return source, references


@pytest.mark.parametrize("store_kind,workers", [("postgresql", 3), ("sqlite", 2)])
def test_chaos_kills_keep_outputs_exact(store_kind, workers, tmp_path: Path, pg_server,
                                        chaos_source) -> None:
    rng = random.Random(f"chaos-{store_kind}")
    source, references = chaos_source
    if store_kind == "postgresql":
        store_url = pg_server.create_database(f"chaos_{rng.randrange(10**9)}")
    else:
        store_url = f"sqlite:///{tmp_path / 'home' / 'egress.db'}"
    settings = write_home(
        tmp_path / "home",
        store_url=store_url,
        sources={"main": source},
        worker={
            "concurrency": 2, "lease_seconds": 3.0, "heartbeat_seconds": 0.5,
            "slice_seconds": 1.0, "reconcile_seconds": 0.5, "poll_seconds": 0.1,
            "backoff_seconds": 0.2, "max_attempts": 20,
        },
    )
    store = SqlJobStore(store_url)
    try:
        _run_chaos(store, store_kind, workers, tmp_path, references, settings, rng)
    finally:
        store.close()


def _run_chaos(store, store_kind, workers, tmp_path, references, settings, rng) -> None:
    store.migrate()
    exports = []
    for i, table in enumerate(SIZES):
        fmt, comp = table_format(i)
        request = ExportRequest(source="main", tables=(table,), format=fmt, compression=comp,
                                options={"part_rows": PART_ROWS})
        exports.append(create_export(store, settings, request)[0])

    log = tmp_path / "workers.log"
    procs = [start_worker(settings.home, log) for _ in range(workers)]
    kills = 0
    deadline = time.monotonic() + 600
    try:
        # KILLS kills, then the workers finish undisturbed: the chaos is bounded, and a
        # loaded machine (a worker takes a second or more to start) cannot livelock it
        while kills < KILLS and not all_terminal(store, [e.id for e in exports]):
            time.sleep(rng.uniform(0.5, 1.2))
            victim = rng.randrange(len(procs))
            stop(procs[victim])
            procs[victim] = start_worker(settings.home, log)
            kills += 1
        while not all_terminal(store, [e.id for e in exports]):
            assert time.monotonic() < deadline, f"exports not done after {kills} kills"
            time.sleep(0.5)
    finally:
        for p in procs:
            stop(p)

    print(f"chaos {store_kind}: {kills} kills")
    assert kills >= KILLS, f"only {kills} kills happened before the exports finished"
    for export in exports:
        final = store.export_get(None, export.id)
        assert final is not None and final.state is ExportState.COMPLETED, final
        assert export_outputs(settings, export) == references[export.tables[0]], export.id
    problems = check_leases(store.lease_events())
    assert problems == []

"""A worker process frozen (SIGSTOP) in the middle of a part, its lease taken over and its
export finished by another worker, then woken (SIGCONT), writes nothing: no byte in any
file or folder of the export (its staging area included) or of the bucket, no upload,
no "task failed" — and the export stays completed with the bytes of an uninterrupted run.

Two moments of the freeze: while the part is being read (a paced source makes that the
worker's usual state), and inside the sink's write of a part right after the store's
fence let it through (tests/freezeworker.py stops the process there), the window a
check-then-write fence leaves open: the local sink's per-writer staged copies close it.
"""

from __future__ import annotations

import hashlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from egress.config import load_settings
from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from jobsharness import (
    all_terminal,
    check_leases,
    export_outputs,
    make_events_db,
    reference_outputs,
    start_worker,
    stop,
    wait_until,
    write_home,
)

pytestmark = pytest.mark.slow
PART_ROWS = 2000
ROWS = 40_000  # 20 parts, paced at 0.15 s a page: a run takes 3 s or more
HOOK = Path(__file__).parent.parent / "freezeworker.py"


def _stopped(pid: int) -> bool:
    return "T (stopped)" in Path(f"/proc/{pid}/status").read_text()


def _local_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder of the export (staging included): size and mtime."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [root, *root.rglob("*")]}


def _bucket_state(s3: Any, prefix: str) -> dict[str, Any]:
    listed = s3.client.list_objects_v2(Bucket=s3.name, Prefix=prefix).get("Contents", [])
    return {"objects": {o["Key"]: (o["ETag"], o["Size"], o["LastModified"]) for o in listed},
            "uploads": s3.uploads(prefix)}


@pytest.mark.parametrize(("destination", "moment", "part"), [
    ("local", "reading", 0),
    ("local", "after-the-fence", 3),
    ("local", "after-the-fence", 1),  # its first write would make its staged copy
    ("s3", "reading", 0),
    ("s3", "after-the-fence", 3),
])
def test_a_zombie_worker_writes_nothing_after_it_wakes(
    tmp_path: Path, pg_server: Any, request: pytest.FixtureRequest, destination: str,
    moment: str, part: int,
) -> None:
    source = make_events_db(tmp_path / "source.db", {"t": ROWS}, seed=7)
    store_url = pg_server.create_database(
        f"zombie_{destination}_{moment}_{part}".replace("-", "_"))
    home = tmp_path / "home"
    settings = write_home(
        home, store_url=store_url, sources={"main": source},
        worker={"concurrency": 1, "lease_seconds": 1.5, "heartbeat_seconds": 0.3,
                "reconcile_seconds": 0.3, "poll_seconds": 0.1, "slice_seconds": 60.0,
                "backoff_seconds": 0.2, "max_attempts": 20},
        source_limits={"main": {"page_pause_seconds": 0.15}},
    )
    s3 = None
    if destination == "s3":
        s3 = request.getfixturevalue("s3")  # moto on 127.0.0.1, its address in the env
        with open(home / "egress.toml", "a") as f:
            f.write(f'\n[destinations.lake]\ntype = "s3"\nbucket = "{s3.name}"\n'
                    'prefix = "egress"\nmin_part_bytes = 1024\n'
                    # moto answers a part for a completed upload with a 500 (S3: 404
                    # NoSuchUpload), which is retried: for seconds here, not a minute
                    "retry_seconds = 3.0\n"
                    # moto lists every upload as started in 2010: no sweep of "old" ones
                    "\n[export]\norphan_sweep_seconds = inf\n")
        settings = load_settings(home, env={})
    store = SqlJobStore(store_url)
    store.migrate()
    export, _ = create_export(store, settings, ExportRequest(
        source="main", tables=("t",), format="csv", compression="gzip",
        destination="lake" if s3 else "local", options={"part_rows": PART_ROWS}))
    (task,) = store.task_list(export.id)
    zombie = rescuer = None
    try:
        zombie_log, mark = tmp_path / "zombie.log", tmp_path / "frozen"
        if moment == "after-the-fence":
            zombie = start_worker(home, zombie_log, script=HOOK, env_extra={
                "FREEZE_AT_PART": str(part), "FREEZE_MARK": str(mark)})
            assert wait_until(lambda: mark.exists() and _stopped(zombie.pid), 60, every=0.05), \
                zombie_log.read_text()[-3000:]
        else:
            zombie = start_worker(home, zombie_log)
            assert wait_until(lambda: store.task_get(task.id).rows >= 2 * PART_ROWS, 60,
                              every=0.05), zombie_log.read_text()[-3000:]
            zombie.send_signal(signal.SIGSTOP)  # while it reads a part (or, rarely, stores it)
            assert wait_until(lambda: _stopped(zombie.pid), 10, every=0.02)
        claims = [e for e in store.lease_events(task.id) if e.kind == "claim"]
        frozen_token = claims[-1].lease_token
        assert store.task_get(task.id).rows < ROWS  # frozen before the end
        if part == 1:
            assert store.task_get(task.id).rows == 0

        rescuer = start_worker(home, tmp_path / "rescuer.log")
        assert wait_until(lambda: all_terminal(store, [export.id]), 60), \
            (tmp_path / "rescuer.log").read_text()[-3000:]
        stop(rescuer)  # from here on only the zombie could write
        assert store.task_get(task.id).lease_token != frozen_token
        prefix = f"egress/default/{export.id}/"
        root = None if s3 else export_root(settings, export)

        def state() -> Any:
            return _local_state(root) if root else _bucket_state(s3, prefix)

        before = state()
        time.sleep(0.05)  # a write from now on shows in an mtime
        zombie.send_signal(signal.SIGCONT)
        woke = ("lease lost; stopped writing", "task failed", "slice failed")
        assert wait_until(lambda: any(w in zombie_log.read_text() for w in woke), 30)
        time.sleep(1.0)  # anything it would still do after saying so
        assert state() == before, "the zombie wrote after it woke"
        assert zombie.poll() is None  # alive, and idle: it only lost a task
        log = zombie_log.read_text()
        assert "task failed" not in log and "slice failed" not in log, log[-3000:]
    finally:
        for proc in (zombie, rescuer):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                stop(proc)
        events = store.lease_events(task.id)
        store.close()
    assert check_leases(events) == []
    final = SqlJobStore(store_url)
    try:
        assert final.export_get(None, export.id).state is ExportState.COMPLETED
    finally:
        final.close()
    expected = reference_outputs(source, "t", "csv", "gzip", PART_ROWS, tmp_path / "ref")
    if s3:
        objects = s3.objects(prefix)
        got = {k: hashlib.sha256(v).hexdigest() for k, v in objects.items()
               if k not in ("manifest.json", "_SUCCESS")}
        assert got == expected
        assert s3.uploads(prefix) == []
    else:
        assert export_outputs(settings, export) == expected
        # removed once the export completed, and not made again by the zombie
        staging = export_root(settings, export) / ".egress" / "staging"
        assert not staging.exists(), (
            sorted(p.name for p in staging.iterdir()),
            (tmp_path / "rescuer.log").read_text()[-4000:])

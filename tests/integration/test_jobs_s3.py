"""The job system writing to an S3 destination (a real moto server on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

from egress.config import load_settings
from egress.domain.jobs import ExportState
from egress.manager import ExportRequest, cancel_export, create_export
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from egress.worker.reconciler import reconcile_once
from jobsharness import make_events_db, wait_until


def _settings(tmp_path: Path, bucket: str, source: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / "egress.toml").write_text(
        f'[sources.main]\nurl = "{source}"\n\n'
        f'[destinations.lake]\ntype = "s3"\nbucket = "{bucket}"\nprefix = "egress"\n'
        "min_part_bytes = 1024\n\n"
        "[worker]\nconcurrency = 2\nslice_seconds = 0.5\nheartbeat_seconds = 0.2\n"
        "poll_seconds = 0.05\nreconcile_seconds = 0.2\nlease_seconds = 5.0\n"
    )
    return load_settings(home, env={})


def test_job_export_to_s3_completes_with_manifest(tmp_path: Path, s3) -> None:
    source = make_events_db(tmp_path / "src.db", {"a": 20_000, "b": 5_000})
    settings = _settings(tmp_path, s3.name, source)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        export, _ = create_export(
            store, settings,
            ExportRequest(source="main", tables=("a", "b"), format="csv", compression="gzip",
                          destination="lake", options={"part_rows": 3000}),
        )
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        final = store.export_get(None, export.id)
        assert final is not None and final.state is ExportState.COMPLETED
        prefix = f"egress/default/{export.id}/"
        objects = s3.objects(prefix)
        assert set(objects) == {"a.csv.gz", "b.csv.gz", "manifest.json", "_SUCCESS"}
        manifest = json.loads(objects["manifest.json"])
        assert manifest["total_rows"] == 25_000
        assert s3.uploads(prefix) == []
    finally:
        store.close()


def test_cancelled_job_leaves_no_upload_and_no_object(tmp_path: Path, s3) -> None:
    source = make_events_db(tmp_path / "src.db", {"big": 200_000})
    settings = _settings(tmp_path, s3.name, source)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        export, _ = create_export(
            store, settings,
            ExportRequest(source="main", tables=("big",), format="jsonl", compression="none",
                          destination="lake", options={"part_rows": 2000}),
        )
        worker = Worker(store, settings)
        thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True})
        thread.start()
        prefix = f"egress/default/{export.id}/"
        try:
            assert wait_until(lambda: s3.uploads(prefix) != [], 30)
            cancel_export(store, "default", export.id)
        finally:
            thread.join(timeout=60)
        assert not thread.is_alive()
        assert store.export_get(None, export.id).state is ExportState.CANCELLED
        assert wait_until(lambda: reconcile_once(store, settings).cleaned == 1
                          or s3.uploads(prefix) == [], 10)
        assert s3.uploads(prefix) == []
        assert s3.objects(prefix) == {}
    finally:
        store.close()


def test_reconciler_aborts_orphaned_uploads_under_the_prefix_only(tmp_path: Path, s3) -> None:
    from egress.worker.reconciler import sweep_orphaned_uploads

    home = tmp_path / "home"
    home.mkdir()
    (home / "egress.toml").write_text(
        f'[destinations.lake]\ntype = "s3"\nbucket = "{s3.name}"\nprefix = "egress"\n\n'
        "[export]\nmax_duration = 0.0\norphan_upload_seconds = 0.0\norphan_sweep_seconds = 0.0\n"
    )
    settings = load_settings(home, env={})
    client = s3.client
    client.create_multipart_upload(Bucket=s3.name, Key="egress/default/exp_x/t.csv")
    client.create_multipart_upload(Bucket=s3.name, Key="other-app/file.bin")
    assert sweep_orphaned_uploads(settings) == 1
    assert [u["Key"] for u in s3.uploads()] == ["other-app/file.bin"]


def test_the_sweep_never_aborts_an_upload_of_an_export_still_running(
    tmp_path: Path, s3
) -> None:
    """moto dates every upload 2010, so by age alone all of them are orphans: the sweep
    must learn from the store which exports may still be using theirs (a slice creates
    an upload before the commit that records it)."""
    from egress.worker.reconciler import sweep_orphaned_uploads

    source = make_events_db(tmp_path / "src.db", {"a": 10})
    settings = _settings(tmp_path, s3.name, source)
    settings = replace(settings, export=replace(settings.export, orphan_sweep_seconds=0.0))
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()

        def new_export() -> str:
            export, _ = create_export(store, settings, ExportRequest(
                source="main", tables=("a",), format="csv", destination="lake"))
            return export.id

        running, cancelled = new_export(), new_export()
        cancel_export(store, "default", cancelled)
        for export_id in (running, cancelled, "exp_gone"):
            s3.client.create_multipart_upload(
                Bucket=s3.name, Key=f"egress/default/{export_id}/a.csv")
        assert sweep_orphaned_uploads(settings, store=store) == 2
        assert [u["Key"] for u in s3.uploads()] == [f"egress/default/{running}/a.csv"]
        # without the store (as before) the age alone decides
        assert sweep_orphaned_uploads(settings) == 1
        assert s3.uploads() == []
    finally:
        store.close()


def test_split_job_to_s3_writes_each_range_in_key_order(tmp_path: Path, s3) -> None:
    import csv
    import gzip
    import io

    source = make_events_db(tmp_path / "src.db", {"a": 20_000})
    settings = _settings(tmp_path, s3.name, source)
    store = SqlJobStore(settings.store_url)
    try:
        store.migrate()
        exports = [create_export(store, settings, ExportRequest(
            source="main", tables=("a",), format="csv", compression="gzip", destination="lake",
            options={"part_rows": 1500, **split}))[0]
            for split in ({"split": 3, "split_files": True}, {})]
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        rows = []
        for export in exports:
            final = store.export_get(None, export.id)
            assert final is not None and final.state is ExportState.COMPLETED
            prefix = f"egress/default/{export.id}/"
            objects = s3.objects(prefix)
            names = [f["name"] for f in final.manifest["files"]]
            assert set(objects) == {*names, "manifest.json", "_SUCCESS"}
            rows.append([r for n in names for r in list(csv.reader(io.StringIO(
                gzip.decompress(objects[n]).decode())))[1:]])
            assert s3.uploads(prefix) == []
        assert names == ["a.csv.gz"]
        assert len(rows[0]) == 20_000 and rows[0] == rows[1]
        split_names = [f["name"] for f in store.export_get(None, exports[0].id).manifest["files"]]
        assert split_names == ["a.r01-00001.csv.gz", "a.r02-00001.csv.gz", "a.r03-00001.csv.gz"]
    finally:
        store.close()

"""Retention: the files of a completed export are removed after ``retention_days`` and
the export shows ``expired`` (SQLite and PostgreSQL stores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress.config import load_settings
from egress.export_view import export_view
from egress.manager import ExportRequest, create_export, export_root
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from egress.worker.reconciler import reconcile_once
from jobsharness import make_events_db, wait_until, write_home


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_completed_export_expires_after_retention(kind: str, tmp_path: Path, request) -> None:
    source = make_events_db(tmp_path / "src.db", {"t": 3_000})
    store_url = (request.getfixturevalue("pg_url") if kind == "postgresql"
                 else f"sqlite:///{tmp_path / 'home' / 'egress.db'}")
    write_home(tmp_path / "home", store_url=store_url, sources={"main": source},
               worker={"poll_seconds": 0.05})
    with (tmp_path / "home" / "egress.toml").open("a") as f:
        f.write("\n[export]\nretention_days = 0.0001\n")  # 8.64 s
    settings = load_settings(tmp_path / "home", env={})
    store = SqlJobStore(store_url)
    try:
        store.migrate()
        export, _ = create_export(store, settings, ExportRequest(source="main", tables=("t",)))
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        root = export_root(settings, export)
        assert (root / "t.csv").exists() and (root / "_SUCCESS").exists()
        finished = store.export_get(None, export.id).finished_at
        if store.now() - finished < 8.0:
            assert reconcile_once(store, settings).expired == 0  # not yet
            assert export_view(store, store.export_get(None, export.id), settings
                               ).status == "completed"
        assert wait_until(lambda: reconcile_once(store, settings).expired == 1, 20, every=0.5)
        assert store.now() - finished >= 8.64
        assert not root.exists()
        view = export_view(store, store.export_get(None, export.id), settings)
        assert view.status == "expired"
        assert reconcile_once(store, settings).expired == 0  # idempotent
        assert store.export_expire(export.id) is False
    finally:
        store.close()

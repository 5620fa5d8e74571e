"""No multipart upload is left open by the job path (store, worker, S3 on moto): not by
an export that fails and is retried, not by a CreateMultipartUpload whose reply was lost.
An upload no checkpoint recorded is aborted when the slice that created it ends."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

import egress
import egress.sinks.s3 as s3_module
from egress.config import Settings, load_settings
from egress.domain.jobs import ExportRecord, ExportState
from egress.exceptions import SinkError
from egress.manager import ExportRequest, create_export, retry_export
from egress.sinks.s3 import S3Sink
from egress.store.sql import SqlJobStore
from egress.worker.loop import Worker
from jobsharness import make_events_db, reference_outputs

PART_ROWS = 2000


def _settings(tmp_path: Path, bucket: str, source: str) -> Settings:
    home = tmp_path / "home"
    home.mkdir()
    (home / "egress.toml").write_text(
        f'[store]\nurl = "sqlite:///{tmp_path / "store.db"}"\n\n'
        f'[sources.main]\nurl = "{source}"\n\n'
        f'[destinations.lake]\ntype = "s3"\nbucket = "{bucket}"\nprefix = "egress"\n'
        "min_part_bytes = 1024\n\n"
        # moto lists every upload as started in 2010: the orphan sweep would take them all
        "[export]\norphan_sweep_seconds = inf\n\n"
        "[worker]\nconcurrency = 1\nslice_seconds = 0.5\nheartbeat_seconds = 0.2\n"
        "poll_seconds = 0.05\nreconcile_seconds = 0.2\nlease_seconds = 5.0\n"
        "backoff_seconds = 0.05\n"
    )
    return load_settings(home, env={})


def _create(store: SqlJobStore, settings: Settings) -> ExportRecord:
    return create_export(store, settings, ExportRequest(
        source="main", tables=("t",), format="csv", compression="gzip", destination="lake",
        options={"part_rows": PART_ROWS}))[0]


def _check_output(s3: Any, prefix: str, source: str, tmp_path: Path) -> None:
    objects = s3.objects(prefix)
    got = {k: hashlib.sha256(v).hexdigest() for k, v in objects.items()
           if k not in ("manifest.json", "_SUCCESS")}
    assert got == reference_outputs(source, "t", "csv", "gzip", PART_ROWS, tmp_path / "ref")


@pytest.mark.parametrize("fail_at", [1, 3])
def test_a_failed_and_retried_export_leaves_no_upload_open(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """Part ``fail_at`` fails for good: the export fails. Its upload stays open only if a
    checkpoint recorded it (the retry continues it); one no commit recorded (the failure
    came at the first part) is aborted at once. ``egress jobs retry`` then completes the
    export, and no upload is left."""
    source = make_events_db(tmp_path / "src.db", {"t": 12_000}, seed=3)
    settings = _settings(tmp_path, s3.name, source)
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        export = _create(store, settings)
        prefix = f"egress/default/{export.id}/"
        put_part = S3Sink.put_part
        failed: list[int] = []

        def failing(self: S3Sink, name: str, state: dict[str, Any], number: int,
                    offset: int, data: bytes) -> str | None:
            if number == fail_at and not failed:
                failed.append(number)
                raise SinkError("access denied to bucket (injected, once)")
            return put_part(self, name, state, number, offset, data)

        monkeypatch.setattr(S3Sink, "put_part", failing)
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        assert failed == [fail_at]
        assert store.export_get(None, export.id).state is ExportState.FAILED
        (task,) = store.task_list(export.id)
        recorded = (task.checkpoint or {}).get("open_file")
        open_ids = [u["UploadId"] for u in s3.uploads(prefix)]
        if fail_at == 1:
            assert recorded is None and open_ids == []  # nothing will ever use it
        else:
            assert recorded is not None and open_ids == [recorded["sink_state"]["upload_id"]]

        retry_export(store, "default", export.id, settings)
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        assert store.export_get(None, export.id).state is ExportState.COMPLETED
        assert s3.uploads(prefix) == []
        _check_output(s3, prefix, source, tmp_path)
    finally:
        store.close()


def test_a_lost_create_reply_in_a_worker_leaves_no_upload_open(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first CreateMultipartUpload reaches the server but its reply is lost (a read
    timeout): the sink retries and gets a second upload, aborts the first it never heard
    of, and the export completes with no upload left open."""
    source = make_events_db(tmp_path / "src.db", {"t": 8_000}, seed=4)
    settings = _settings(tmp_path, s3.name, source)
    store = SqlJobStore(settings.store_url)
    store.migrate()
    lost: list[str] = []
    make_client = s3_module.make_client

    class LosingClient:
        """The first CreateMultipartUpload goes through; its reply does not arrive."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def create_multipart_upload(self, **kwargs: Any) -> Any:
            resp = self.inner.create_multipart_upload(**kwargs)
            if not lost:
                lost.append(resp["UploadId"])
                raise ReadTimeoutError(endpoint_url="http://127.0.0.1 (reply lost)")
            return resp

    try:
        export = _create(store, settings)
        prefix = f"egress/default/{export.id}/"
        monkeypatch.setattr(s3_module, "make_client",
                            lambda **kw: LosingClient(make_client(**kw)))
        assert Worker(store, settings).run(exit_when_idle=True) == 0
        assert len(lost) == 1
        assert store.export_get(None, export.id).state is ExportState.COMPLETED
        assert s3.uploads(prefix) == []
        _check_output(s3, prefix, source, tmp_path)
    finally:
        store.close()


def test_a_one_shot_export_failing_at_a_files_first_part_leaves_no_upload_open(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No checkpoint recorded the upload (its first part never committed): the failed
    export aborts it before it stops (and, having committed nothing, keeps no state);
    the export run again completes."""
    source = make_events_db(tmp_path / "src.db", {"t": 6_000}, seed=5)
    put_part = S3Sink.put_part

    def failing(self: S3Sink, name: str, state: dict[str, Any], number: int,
                offset: int, data: bytes) -> str | None:
        raise SinkError("access denied to bucket (injected)")

    common: dict[str, Any] = dict(format="csv", compression="gzip", part_rows=PART_ROWS,
                                  sink_options={"min_part_bytes": 1024})
    monkeypatch.setattr(S3Sink, "put_part", failing)
    with pytest.raises(SinkError, match="injected"):
        egress.export(source, ["t"], to=s3.url("one"), **common)
    assert s3.uploads("one/") == []
    monkeypatch.setattr(S3Sink, "put_part", put_part)
    egress.export(source, ["t"], to=s3.url("one"), **common)
    assert s3.uploads("one/") == []
    _check_output(s3, "one/", source, tmp_path)

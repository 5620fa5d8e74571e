"""The S3 sink against a real S3-protocol server (moto, as a process on 127.0.0.1).

Every format goes through ``egress.export(..., to="s3://bucket/prefix")`` and must come
out byte-identical to the same export into a local directory (whose formats are checked
with independent readers elsewhere). Faults are injected at botocore's transport seam
(a ``before-send`` event hook), the way a flaky network or S3 itself would fail.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import random
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import google_crc32c
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session

import egress
from egress.domain.checkpoint import PartRecord
from egress.domain.crc import crc32c_base64
from egress.exceptions import ConfigError, SinkError, SinkUnavailableError, UnknownNameError
from egress.manager import export_id_in
from egress.oneshot import discard
from egress.sinks import open_sink
from egress.sinks.local import LocalSink
from egress.sinks.s3 import S3Sink
from egress.sinks.s3_client import make_client
from s3server import TEST_MIN_PART, S3Bucket

SINK = {"min_part_bytes": TEST_MIN_PART, "backoff": 0.01}


def make_db(path: Path, rows: int = 600, seed: int = 7) -> str:
    """``events`` and a small ``users`` table. Hex text compresses about 2:1, so every
    40-row part stays above the server's minimum part size even when compressed (the
    engine grows a part to ``min_part_bytes`` before compression)."""
    rnd = random.Random(seed)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT, amount REAL, "
            "payload TEXT, note TEXT)"
        )
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            [
                (i, f"event-{i}", rnd.random() * 1e6, rnd.randbytes(rnd.randint(30, 70)).hex(),
                 None if i % 7 == 0 else f"note, \"quoted\" {i}")
                for i in range(1, rows + 1)
            ],
        )
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
        db.executemany(
            "INSERT INTO users VALUES (?, ?)",
            [(i, f"{rnd.randbytes(30).hex()}@x.org") for i in range(50)],
        )
    return f"sqlite:///{path}"


def local_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".egress" not in p.parts
    }


def same_output(a: dict[str, bytes], b: dict[str, bytes]) -> None:
    """Identical data files; manifests equal but for times and destination (the SHA-256
    of each file included: S3's is computed as the parts go up, or read back)."""
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "manifest.json":
            assert a[name] == b[name], name
    ma, mb = json.loads(a["manifest.json"]), json.loads(b["manifest.json"])
    for m in (ma, mb):
        for key in ("started_at", "finished_at", "destination"):
            m.pop(key)
    assert ma == mb


class StopAfter:
    """Asks a one-table export to stop after ``n`` parts. The export asks once before the
    table's first slice, then the slice asks before each part (while it encodes one part
    it still stores the one before: a count of commits would race with that) and commits
    the parts in hand before it stops."""

    def __init__(self, n: int) -> None:
        self.n, self.asked, self.commits = n, 0, 0

    def table_started(self, *args: Any) -> None: ...

    def advanced(self, table: str, checkpoint: Any) -> None:
        self.commits += 1

    def table_done(self, *args: Any) -> None: ...

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.n + 1


# --- every format round-trips ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "compression", "max_file_size"),
    [
        ("csv", "none", None),
        ("csv", "gzip", 6000),
        ("jsonl", "zstd", None),
        ("json", "gzip", None),
        ("sql", "none", 9000),
        ("parquet", "zstd", None),
        ("parquet", "none", None),  # parts handed on as pyarrow's buffers
    ],
)
def test_every_format_round_trips(
    s3: S3Bucket, tmp_path: Path, fmt: str, compression: str, max_file_size: int | None
) -> None:
    source = make_db(tmp_path / "db.sqlite")
    common = dict(
        tables=["events", "users"], format=fmt, compression=compression,
        max_file_size=max_file_size, part_rows=40, fsync=False,
    )
    egress.export(source, to=tmp_path / "local", **common)
    result = egress.export(source, to=s3.url("out"), sink_options=SINK, **common)

    assert result.out == f"s3://{s3.name}/out" and not result.interrupted
    objects = s3.objects("out")
    same_output(local_files(tmp_path / "local"), objects)
    assert s3.uploads() == []
    manifest = json.loads(objects["manifest.json"])
    assert manifest["destination"] == f"s3://{s3.name}/out"
    if fmt != "parquet":  # a Parquet part is a whole object; the others span many parts
        assert max(f["parts"] for f in manifest["files"]) >= 2
    for f in manifest["files"]:
        # the server's own full-object CRC32C agrees with the manifest's
        head = s3.client.head_object(Bucket=s3.name, Key=f"out/{f['name']}", ChecksumMode="ENABLED")
        assert head["ChecksumCRC32C"] == crc32c_base64(int(f["crc32c"], 16))
        assert f["sha256"] == hashlib.sha256(objects[f["name"]]).hexdigest()


@pytest.mark.parametrize("checksum", ["composite", "off"])
def test_checksum_modes_write_the_same_bytes(s3: S3Bucket, tmp_path: Path, checksum: str) -> None:
    source = make_db(tmp_path / "db.sqlite", rows=200)
    common = dict(tables=["events"], format="csv", compression="gzip", part_rows=40, fsync=False)
    egress.export(source, to=tmp_path / "local", **common)
    egress.export(source, to=s3.url("c"), sink_options={**SINK, "checksum": checksum}, **common)
    same_output(local_files(tmp_path / "local"), s3.objects("c"))


def test_resume_keeps_state_outside_the_bucket(s3: S3Bucket, tmp_path: Path) -> None:
    source = make_db(tmp_path / "db.sqlite")
    common = dict(tables=["events"], format="jsonl", part_rows=40, sink_options=SINK)
    stop = StopAfter(4)
    first = egress.export(source, to=s3.url("r"), progress=stop, should_stop=stop, **common)
    assert first.interrupted
    state_dirs = list((tmp_path / "egress-home" / "oneshot").iterdir())
    assert len(state_dirs) == 1 and (state_dirs[0] / "state.json").exists()
    assert "manifest.json" not in s3.objects("r")  # only finished files, nothing else
    with pytest.raises(ConfigError, match="unfinished export"):
        egress.export(source, to=s3.url("r"), **common)
    done = egress.export(source, to=s3.url("r"), resume=True, **common)
    assert not done.interrupted and not state_dirs[0].exists()
    egress.export(source, to=tmp_path / "local", tables=["events"], format="jsonl",
                  part_rows=40, fsync=False)
    same_output(local_files(tmp_path / "local"), s3.objects("r"))
    with pytest.raises(ConfigError, match="already holds a completed export"):
        egress.export(source, to=s3.url("r"), **common)


def test_a_resume_in_another_process_still_gives_each_files_sha256(
    s3: S3Bucket, tmp_path: Path
) -> None:
    """The running digest lives in the uploading process: a file continued by another one
    (a crash, a kill) is read back once at completion, and its SHA-256 is still right."""
    source = make_db(tmp_path / "db.sqlite")
    common = dict(tables=["events"], format="csv", compression="gzip", part_rows=40,
                  sink_options=SINK)
    stop = StopAfter(4)
    first = egress.export(source, to=s3.url("p"), progress=stop, should_stop=stop, **common)
    assert first.interrupted
    resume = (f"import egress; egress.export({source!r}, to={s3.url('p')!r}, resume=True, "
              f"**{common!r})")
    done = subprocess.run([sys.executable, "-c", resume], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    objects = s3.objects("p")
    [entry] = json.loads(objects["manifest.json"])["files"]
    assert entry["parts"] >= 5  # parts from both processes
    assert entry["sha256"] == hashlib.sha256(objects[entry["name"]]).hexdigest()


# --- faults at the transport seam -------------------------------------------------------


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs: Any) -> Any:
        yield self.body


def _error(request: Any, status: int, code: str) -> AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, _Raw(body))


class Faults:
    """Per S3 operation, a script of what happens to each call in turn: ``None`` (sent
    as is), ``"500"``/``"503"``/``"403"``/``"412"`` (the server answers that error without
    acting), ``"200-error"`` (an error inside a 200 body), ``"reset"`` (the connection drops
    before the request arrives), ``"lost-reply"`` (the server acts, the reply is lost)."""

    def __init__(self, client: Any, script: dict[str, list[str | None]]) -> None:
        self.script = {op: list(steps) for op, steps in script.items()}
        self.calls: dict[str, int] = {}
        self.sent: list[tuple[str, str]] = []
        self._http = URLLib3Session()
        for op in script:
            client.meta.events.register(f"before-send.s3.{op}", self)
        client.meta.events.register("before-send.s3.UploadPart", self._record)

    def _record(self, request: Any, **kwargs: Any) -> None:
        self.sent.append(("UploadPart", request.url))

    def __call__(self, request: Any, event_name: str, **kwargs: Any) -> AWSResponse | None:
        op = event_name.rsplit(".", 1)[1]
        self.calls[op] = self.calls.get(op, 0) + 1
        steps = self.script[op]
        step = steps.pop(0) if steps else None
        if step is None:
            return None
        if step == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if step == "lost-reply":
            self._http.send(request)
            raise ConnectionClosedError(endpoint_url=request.url)
        if step == "200-error":
            return _error(request, 200, "InternalError")
        codes = {"500": "InternalError", "503": "SlowDown", "403": "AccessDenied",
                 "412": "PreconditionFailed"}
        return _error(request, int(step), codes[step])

    def used_up(self) -> bool:
        return all(not steps for steps in self.script.values())


def _client(s3: S3Bucket, **kwargs: Any) -> Any:
    return make_client(endpoint_url=s3.server.endpoint, **kwargs)


def test_transient_faults_are_retried_and_output_is_identical(
    s3: S3Bucket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = make_db(tmp_path / "db.sqlite")
    client = _client(s3)
    faults = Faults(client, {
        "UploadPart": [None, "500", None, "reset", "lost-reply", None, "503", "503", None],
        # a complete whose reply is lost, retried: real S3 answers 412 (the object exists)
        "CompleteMultipartUpload": ["lost-reply", "412", "200-error", None, "500"],
    })
    common = dict(tables=["events"], format="csv", compression="gzip", part_rows=40,
                  max_file_size=12000)
    caplog.set_level(logging.WARNING, logger="egress")
    egress.export(source, to=s3.url("f"), sink_options={**SINK, "client": client}, **common)
    egress.export(source, to=tmp_path / "local", fsync=False, **common)

    assert faults.used_up()
    same_output(local_files(tmp_path / "local"), s3.objects("f"))
    assert s3.uploads() == []
    retries = [r for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 8  # one per injected fault but the 412, answered by a HEAD


def test_access_denied_fails_clearly_and_aborts_the_upload(s3: S3Bucket, tmp_path: Path) -> None:
    source = make_db(tmp_path / "db.sqlite")
    client = _client(s3, aws_secret_access_key="s3cr3t-never-shown", aws_access_key_id="AKIDX")
    faults = Faults(client, {"UploadPart": [None, None, "403"]})
    with pytest.raises(SinkError) as info:
        egress.export(source, ["events"], to=s3.url("d"), format="csv", part_rows=40,
                      sink_options={**SINK, "client": client})
    assert str(info.value) == f"access denied to bucket '{s3.name}' (upload_part: AccessDenied)"
    assert not info.value.transient
    assert faults.calls["UploadPart"] == 3  # a 403 is not retried
    assert s3.uploads() == [] and s3.objects("d") == {}


def test_unknown_bucket_is_named(s3: S3Bucket, tmp_path: Path) -> None:
    source = make_db(tmp_path / "db.sqlite", rows=10)
    with pytest.raises(SinkError, match="bucket 'no-such-bucket' does not exist"):
        egress.export(source, ["events"], to="s3://no-such-bucket/x", format="csv")


# --- cancel, zombies, repair ------------------------------------------------------------


def test_cancelled_export_leaves_nothing_behind(s3: S3Bucket, tmp_path: Path) -> None:
    source = make_db(tmp_path / "db.sqlite")
    stop = StopAfter(5)
    result = egress.export(
        source, ["events"], to=s3.url("c"), format="csv", part_rows=40, max_file_size=6000,
        sink_options=SINK, progress=stop, should_stop=stop,
    )
    assert result.interrupted
    assert s3.objects("c") and s3.uploads("c/")  # finished files and an open upload
    S3Sink(s3.name, "c").start_file("events-00009.csv")  # an upload a crash left unrecorded
    assert discard(s3.url("c"), sink_options=SINK) >= 1
    assert s3.objects("c") == {} and s3.uploads() == []
    with pytest.raises(ConfigError, match="nothing to cancel"):
        discard(s3.url("c"))


def _parts(n: int, size: int = TEST_MIN_PART) -> list[bytes]:
    return [bytes([65 + i]) * size for i in range(n)]


def _write(sink: S3Sink, name: str, chunks: list[bytes]) -> tuple[dict[str, Any], list[Any]]:
    state, records, offset = sink.start_file(name), [], 0
    for number, data in enumerate(chunks, 1):
        etag = sink.put_part(name, state, number, offset, data)
        records.append(PartRecord(number, 1, len(data), google_crc32c.value(data), etag, (number,)))
        offset += len(data)
    return state, records


def test_a_zombie_cannot_overwrite_a_completed_object(s3: S3Bucket) -> None:
    sink = S3Sink(s3.name, "z", **SINK)
    zombie_state, zombie_parts = _write(sink, "t.csv", _parts(2))  # started first, slow
    state, parts = _write(sink, "t.csv", [b"x" * TEST_MIN_PART, b"y" * 10])
    sink.complete_file("t.csv", state, sum(p.size for p in parts), parts)
    # the owner retrying its own complete is fine (idempotent)…
    sink.complete_file("t.csv", state, sum(p.size for p in parts), parts)
    assert sink.verify_parts("t.csv", state, parts) == len(parts)
    # …the zombie's complete is refused, and its upload is gone
    with pytest.raises(SinkError, match="completed by another upload"):
        sink.complete_file("t.csv", zombie_state, sum(p.size for p in zombie_parts), zombie_parts)
    assert s3.objects("z") == {"t.csv": b"x" * TEST_MIN_PART + b"y" * 10}
    assert s3.uploads() == []
    with pytest.raises(SinkError, match="already exists"):
        sink.start_file("t.csv")


def test_a_late_complete_of_an_earlier_upload_of_the_same_parts_is_ours(
    s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every complete reply lost; a resume started a new upload of the same parts (its
    abort of the old upload lost the race with the complete still running on the server),
    and the first complete then landed: the object is this file, so the export finishes."""
    sink = S3Sink(s3.name, "late", **SINK)
    chunks = [b"a" * TEST_MIN_PART, b"b" * TEST_MIN_PART, b"c" * 10]
    first_state, first_parts = _write(sink, "t.csv", chunks)
    size = sum(p.size for p in first_parts)
    with monkeypatch.context() as lost_race:
        lost_race.setattr(S3Sink, "abort_orphaned_uploads", lambda *a, **k: 0)
        second_state, second_parts = _write(sink, "t.csv", chunks)  # the resume's upload
    sink.complete_file("t.csv", first_state, size, first_parts)  # the late complete
    sha = sink.complete_file("t.csv", second_state, size, second_parts)
    assert sha == hashlib.sha256(b"".join(chunks)).hexdigest()
    assert s3.objects("late") == {"t.csv": b"".join(chunks)}
    assert s3.uploads() == []  # the resume's own upload is aborted
    # (other bytes under the name stay someone else's: test_a_zombie_cannot_overwrite…)


class LateComplete:
    """Every CompleteMultipartUpload reply is lost, and the first request stays on the
    server, still executing, while a resume looks for its upload (ListParts: no such
    upload; no object yet) and starts the file over; the complete lands just then — when
    the resume aborts the upload it thinks is gone — before the file is started again."""

    def __init__(self, client: Any) -> None:
        self.held: Any = None
        self.landed = False
        self._http = URLLib3Session()
        events = client.meta.events
        events.register("before-send.s3.CompleteMultipartUpload", self._complete)
        events.register("before-send.s3.ListParts", self._list_parts)
        events.register("before-send.s3.AbortMultipartUpload", self._abort)

    def _complete(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        if self.landed:
            return None
        if self.held is None:
            self.held = request  # the server has it and is still at work
        raise ConnectionClosedError(endpoint_url=request.url)

    def _list_parts(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        return _error(request, 404, "NoSuchUpload") if self.held is not None else None

    def _abort(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        if self.held is not None and not self.landed:
            response = self._http.send(self.held)
            assert response.status_code == 200, response.content
            self.landed = True
        return None


def test_a_complete_that_lands_while_a_resume_starts_the_file_over_finishes_the_export(
    s3: S3Bucket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = make_db(tmp_path / "db.sqlite")
    common = dict(tables=["events"], format="csv", compression="gzip", part_rows=40)
    client = _client(s3)
    late = LateComplete(client)
    with pytest.raises(SinkUnavailableError, match="complete_multipart_upload"):
        egress.export(source, to=s3.url("late"), **common, sink_options={
            **SINK, "client": client, "max_attempts": 2, "retry_seconds": 0})
    assert late.held is not None and not late.landed and s3.objects("late") == {}

    caplog.set_level(logging.WARNING, logger="egress")
    egress.export(source, to=s3.url("late"), resume=True,
                  sink_options={**SINK, "client": client}, **common)
    assert late.landed
    assert any("completed late" in r.getMessage() for r in caplog.records)
    egress.export(source, to=tmp_path / "local", fsync=False, **common)
    same_output(local_files(tmp_path / "local"), s3.objects("late"))
    assert s3.uploads() == []  # the resume's own upload of the same parts is aborted


def test_no_upload_is_left_open_by_a_lost_create_reply_or_a_restart(s3: S3Bucket,
                                                                    tmp_path: Path) -> None:
    """A CreateMultipartUpload whose reply is lost is retried: two uploads exist, one is
    used. And a file started over (a resume that found its upload damaged) leaves its old
    upload behind. Both are aborted when the file starts, not a day later."""
    source = make_db(tmp_path / "db.sqlite")
    client = _client(s3)
    faults = Faults(client, {"CreateMultipartUpload": ["lost-reply", None]})
    egress.export(source, ["events"], to=s3.url("l"), format="csv", part_rows=40,
                  sink_options={**SINK, "client": client})
    assert faults.used_up() and s3.uploads() == []
    sink = S3Sink(s3.name, "again", **SINK)
    sink.start_file("t.csv")  # an earlier attempt's upload, never completed
    again = sink.start_file("t.csv")
    assert [u["UploadId"] for u in s3.uploads("again/")] == [again["upload_id"]]


def _open_file_state(tmp_path: Path) -> dict[str, Any]:
    (state_dir,) = (tmp_path / "egress-home" / "oneshot").iterdir()
    data = json.loads((state_dir / "state.json").read_text())
    return data["tasks"]["events"]["checkpoint"]["open_file"]


@pytest.mark.parametrize("damage", ["upload aborted", "part 2 replaced"])
def test_resume_repairs_a_mismatch_from_the_last_agreed_part(
    s3: S3Bucket, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    source = make_db(tmp_path / "db.sqlite")
    common = dict(tables=["events"], format="csv", compression="gzip", part_rows=40)
    stop = StopAfter(5)
    egress.export(source, to=s3.url("m"), progress=stop, should_stop=stop,
                  sink_options=SINK, **common)
    of = _open_file_state(tmp_path)
    assert len(of["parts"]) == 5
    upload = {"Bucket": s3.name, "Key": of["sink_state"]["key"],
              "UploadId": of["sink_state"]["upload_id"]}
    if damage == "upload aborted":
        s3.client.abort_multipart_upload(**upload)
        agreed, first_resent = 0, 1
    else:
        s3.client.upload_part(PartNumber=2, Body=b"garbage" * 300, **upload)
        agreed, first_resent = 1, 2

    client = _client(s3)
    faults = Faults(client, {})
    caplog.set_level(logging.WARNING, logger="egress")
    egress.export(source, to=s3.url("m"), resume=True,
                  sink_options={**SINK, "client": client}, **common)
    egress.export(source, to=tmp_path / "local", fsync=False, **common)

    same_output(local_files(tmp_path / "local"), s3.objects("m"))
    warning = next(r.getMessage() for r in caplog.records if "rewinding" in r.getMessage())
    assert f"agreed={agreed}" in warning
    # nothing before the last agreed part was sent again
    assert f"partNumber={first_resent}&" in faults.sent[0][1] + "&"
    assert s3.uploads() == []


# --- sink details -----------------------------------------------------------------------


def test_presigned_links(s3: S3Bucket) -> None:
    sink = S3Sink(s3.name, "p", **SINK)
    sink.put_object("manifest.json", b"{}\n")
    url = sink.presign("manifest.json", 600)
    assert "X-Amz-Expires=600" in url and "egress-test-secret" not in url
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.read() == b"{}\n"
    assert sink.presign("manifest.json", 7 * 24 * 3600)
    for bad in (0, 7 * 24 * 3600 + 1):
        with pytest.raises(ConfigError, match="within 1 second to 7 days"):
            sink.presign("manifest.json", bad)


def test_orphaned_uploads_are_aborted_by_age_and_prefix(s3: S3Bucket) -> None:
    sink = S3Sink(s3.name, "o", **SINK)
    a, b = sink.start_file("a.csv"), sink.start_file("b.csv")
    S3Sink(s3.name, "other", **SINK).start_file("c.csv")
    # moto reports every upload as initiated at this fixed time; S3 gives the real one
    initiated = dt.datetime(2010, 11, 10, 20, 48, 33, tzinfo=dt.UTC)
    soon = initiated + dt.timedelta(minutes=30)
    assert sink.abort_orphaned_uploads(3600, now=soon) == 0
    later = initiated + dt.timedelta(hours=2)
    assert sink.abort_orphaned_uploads(3600, now=later, keep={b["upload_id"]}) == 1
    assert sorted(u["Key"] for u in s3.uploads()) == ["o/b.csv", "other/c.csv"]
    # the checkpoint of the aborted upload no longer agrees with the server at all
    assert sink.verify_parts("a.csv", a, [PartRecord(1, 1, 5, 0, '"x"', (1,))]) == 0


def test_part_limits_are_checked_with_clear_messages(s3: S3Bucket) -> None:
    sink = S3Sink(s3.name, "l", **SINK)
    state, parts = _write(sink, "small.csv", [b"a" * 100, b"b" * 100])
    with pytest.raises(SinkError, match=r"part 1 .* is 100 bytes; every part but the last"):
        sink.complete_file("small.csv", state, 200, parts)
    with pytest.raises(SinkError, match="beyond S3's 10000 parts"):
        sink.put_part("small.csv", state, 10_001, 0, b"x")
    lax = S3Sink(s3.name, "l", min_part_bytes=0)  # the server still refuses
    with pytest.raises(SinkError, match="EntityTooSmall"):
        lax.complete_file("small.csv", state, 200, parts)


def test_secrets_never_reach_messages_or_logs(
    s3: S3Bucket, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    caplog.set_level(logging.DEBUG, logger="egress")
    sink = S3Sink(s3.name, "s", aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key=secret,
                  **SINK)
    Faults(sink.client, {"CreateMultipartUpload": ["403"]})
    with pytest.raises(SinkError) as info:
        sink.start_file("x.csv")
    assert "access denied" in str(info.value)
    for text in (str(info.value), repr(sink), sink.location, caplog.text, str(vars(sink))):
        assert secret not in text


def test_registry_and_keys(s3: S3Bucket, tmp_path: Path) -> None:
    assert isinstance(open_sink(tmp_path / "out"), LocalSink)
    assert isinstance(open_sink(f"file://{tmp_path}/out2"), LocalSink)
    sink = open_sink(f"s3://{s3.name}/a/b/", **SINK)
    assert isinstance(sink, S3Sink) and sink.location == f"s3://{s3.name}/a/b"
    assert sink.min_part_bytes == TEST_MIN_PART
    assert sink.key("events/part-00001.parquet") == "a/b/events/part-00001.parquet"
    with pytest.raises(UnknownNameError, match="known: file, s3"):
        open_sink("gs://bucket/x")
    with pytest.raises(ConfigError, match="bad S3 bucket name"):
        open_sink("s3://Bad_Bucket/x")
    with pytest.raises(ConfigError, match="bad settings"):
        open_sink(f"s3://{s3.name}/x", no_such_setting=1)
    for name in ("../x.csv", "/x.csv", "a//b.csv", "a/./b", "a b.csv", "x.csv?y"):
        with pytest.raises(SinkError, match="refusing an object name"):
            sink.key(name)
    child = sink.for_export("Acme/../Corp", "exp_1")
    assert child.prefix.startswith("a/b/Acme_.._Corp-") and child.prefix.endswith("/exp_1")
    assert child.prefix.count("/") == 3 and ".." not in child.prefix.split("/")
    # the reconciler's sweep reads the export back from a name under the destination
    under_destination = child.key("events/events.csv")[len(sink.prefix) + 1:]
    assert export_id_in(under_destination) == "exp_1"
    assert export_id_in("Acme/events.csv") is None and export_id_in("a//b") is None


def test_files_written_by_someone_else_are_listed_and_their_footers_read(
        s3: S3Bucket, tmp_path: Path) -> None:
    """What a remote engine's unload left under a folder: listed with sizes, and a
    Parquet footer read by ranged GETs (the rows are counted without the data)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = S3Sink(s3.name, "lake/p/exp_1", endpoint_url=s3.server.endpoint)
    assert sink.url_of("orders") == f"s3://{s3.name}/lake/p/exp_1/orders/"
    sizes = {}
    for i, n in enumerate((1000, 2500)):
        buffer = io.BytesIO()
        pq.write_table(pa.table({"id": list(range(n)), "name": [f"n{j}" for j in range(n)]}),
                       buffer, row_group_size=700)
        sizes[f"orders/part-{i}.parquet"] = len(buffer.getvalue())
        s3.client.put_object(Bucket=s3.name, Key=f"lake/p/exp_1/orders/part-{i}.parquet",
                             Body=buffer.getvalue())
    s3.client.put_object(Bucket=s3.name, Key="lake/p/exp_1/other/x", Body=b"x")
    listed = sink.list_files("orders")
    assert listed == sorted(sizes.items())
    rows = []
    for name, size in listed:
        with sink.open_reader(name, size) as reader:
            rows.append(pq.ParquetFile(reader).metadata.num_rows)
    assert rows == [1000, 2500]
    local = LocalSink(tmp_path / "out")
    (tmp_path / "out" / "t").mkdir()
    (tmp_path / "out" / "t" / "a.parquet").write_bytes(b"1234")
    assert local.list_files("t") == [("t/a.parquet", 4)]
    assert local.url_of("t") == (tmp_path / "out" / "t").as_uri() + "/"

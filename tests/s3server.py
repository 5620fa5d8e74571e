"""A throwaway S3-protocol server (moto's) on 127.0.0.1 for tests and benchmarks.

It runs as its own process (``python -m moto.server``) so that its settings come from
its environment — ``S3_UPLOAD_PART_MIN_SIZE`` is lowered for small multipart tests —
and so that it never competes with the code under test for the GIL. moto accepts any
credentials; tests give boto3 fake ones through the environment.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from announce import announce

#: The server's smallest non-final part in tests (S3's is 5 MiB).
TEST_MIN_PART = 1024
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "egress-test-key",
    "AWS_SECRET_ACCESS_KEY": "egress-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
_buckets = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]
    log_path: Path
    min_part: int
    _client: Any = field(default=None, repr=False)

    def client(self) -> Any:
        """A plain boto3 client for the test's own checks (listing, reading)."""
        if self._client is None:
            import boto3

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint, region_name="us-east-1",
                aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            )
        return self._client

    def new_bucket(self, stem: str = "t") -> str:
        name = f"{stem}-{os.getpid()}-{next(_buckets)}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``, by key relative to it."""
        c, out = self.client(), {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                body = c.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                out[obj["Key"][len(prefix):].lstrip("/")] = body
        return out

    def uploads(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """Multipart uploads in progress under ``prefix``."""
        resp = self.client().list_multipart_uploads(Bucket=bucket, Prefix=prefix)
        return list(resp.get("Uploads", []))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(min_part: int = TEST_MIN_PART, log_dir: Path | None = None) -> S3Server:
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="egress-moto-"))
    log_path = log_dir / "moto.log"
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": str(min_part)}
    for attempt in range(3):
        port = free_port()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    return S3Server(endpoint, proc, log_path, min_part)
            except OSError:
                time.sleep(0.1)
        proc.kill()
        proc.wait()
        if attempt == 2:
            raise RuntimeError(f"moto server did not start; see {log_path}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_server(min_part: int = TEST_MIN_PART) -> Iterator[S3Server]:
    server = start_server(min_part)
    try:
        yield server
    finally:
        server.stop()


# --- pytest fixtures (imported by tests/conftest.py) -----------------------------------


@dataclass
class S3Bucket:
    """A fresh bucket on the session's server, with the environment pointing boto3 at it."""

    server: S3Server
    name: str

    @property
    def client(self) -> Any:
        return self.server.client()

    def url(self, prefix: str) -> str:
        return f"s3://{self.name}/{prefix}"

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        return self.server.objects(self.name, prefix)

    def uploads(self, prefix: str = "") -> list[dict[str, Any]]:
        return self.server.uploads(self.name, prefix)


@pytest.fixture(scope="session")
def s3_server(pytestconfig: pytest.Config) -> Iterator[S3Server]:
    started = time.monotonic()
    with running_server() as server:
        announce(pytestconfig, f"\nstarted the S3 server (moto) at {server.endpoint} "
                               f"in {time.monotonic() - started:.1f} s")
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Bucket:
    """A fresh bucket; ``AWS_ENDPOINT_URL`` and fake credentials in the environment (as a
    user would set them), no shared AWS config, and ``EGRESS_HOME`` in ``tmp_path``."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("EGRESS_HOME", str(tmp_path / "egress-home"))
    return S3Bucket(s3_server, s3_server.new_bucket())

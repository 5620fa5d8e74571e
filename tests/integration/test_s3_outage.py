"""A one-shot export rides out a 10 s outage of its S3 server (connections refused and
cut, as in a restart or a failover): transient errors are retried for at least a minute
(``retry_seconds``), and the output is the same as an uninterrupted run's."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import egress
from egress.domain.checkpoint import Checkpoint
from s3server import TEST_MIN_PART, S3Bucket
from tcpproxy import OutageProxy

OUTAGE = 10.0


class OutageAfter:
    """Progress that starts an outage (in the background) after ``n`` committed parts."""

    def __init__(self, proxy: OutageProxy, n: int) -> None:
        self.proxy, self.n, self.commits = proxy, n, 0
        self.thread: threading.Thread | None = None

    def table_started(self, *args: Any) -> None: ...

    def advanced(self, table: str, checkpoint: Checkpoint) -> None:
        self.commits += 1
        if self.commits == self.n:
            self.thread = threading.Thread(target=self.proxy.outage, args=(OUTAGE,))
            self.thread.start()

    def table_done(self, *args: Any) -> None: ...


def test_a_ten_second_outage_is_ridden_out(s3: S3Bucket, tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "db.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, payload TEXT)")
    conn.executemany("INSERT INTO events VALUES (?, ?)",
                     [(i, f"{i:08d}" + "x" * 200) for i in range(1, 6001)])
    conn.commit()
    conn.close()
    source = f"sqlite:///{db}"
    proxy = OutageProxy(urlsplit(s3.server.endpoint).port or 80)
    try:
        progress = OutageAfter(proxy, 3)
        common: dict[str, Any] = dict(tables=["events"], format="csv", part_rows=300)
        started = time.monotonic()
        egress.export(source, to=s3.url("o"), progress=progress,
                      sink_options={"endpoint_url": proxy.url, "min_part_bytes": TEST_MIN_PART,
                                    "backoff": 0.25, "connect_timeout": 2.0},
                      **common)
        took = time.monotonic() - started
        assert progress.thread is not None
        progress.thread.join(OUTAGE + 5)
    finally:
        proxy.close()
    assert took >= OUTAGE - 1  # it did wait the outage out
    egress.export(source, to=tmp_path / "local", fsync=False, **common)
    assert s3.objects("o")["events.csv"] == (tmp_path / "local" / "events.csv").read_bytes()
    assert s3.uploads() == []

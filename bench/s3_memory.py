"""Time and peak RSS of a large export to S3 with 8 MiB parts (issue 4: a 1 GB export
must stay under 300 MB of peak RSS). Not part of the test suite.

    .venv/bin/python bench/s3_memory.py                    # about 1 GB of CSV
    .venv/bin/python bench/s3_memory.py --mb 200 --format jsonl --compression gzip

Starts moto's S3 server (tests/s3server.py) with S3's real 5 MiB minimum part size,
builds (or reuses) the benchmark's ``events`` table in SQLite (bench/data.py, about 310
bytes of CSV a row), and runs bench/child.py — one ``egress.export`` in a fresh process
— to ``s3://bench-…/run``. Prints wall time, throughput, the child's peak RSS (its
``ru_maxrss``) and what landed in the bucket. moto keeps objects in its own process:
its memory is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import data
from measure import measure

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from s3server import FAKE_CREDENTIALS, running_server  # noqa: E402

CHILD = Path(__file__).resolve().parent / "child.py"
BYTES_PER_ROW = 310
RSS_LIMIT_MB = 300


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="about this many MB of CSV")
    parser.add_argument("--format", default="csv")
    parser.add_argument("--compression", default="none")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/egress-bench"))
    args = parser.parse_args(argv)

    rows = args.mb * 1_000_000 // BYTES_PER_ROW
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"building {rows:,} rows in SQLite (cached in {args.workdir}) …", flush=True)
    db = data.sqlite_db(args.workdir.resolve(), rows)

    with running_server(min_part=5 * 1024 * 1024) as server, \
            tempfile.TemporaryDirectory() as tmp:
        bucket = server.new_bucket("bench")
        env = {**os.environ, **FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint,
               "EGRESS_HOME": tmp}
        timings = Path(tmp) / "timings.json"
        cmd = [sys.executable, str(CHILD), f"sqlite:///{db}", data.TABLE, args.format,
               args.compression, f"s3://{bucket}/run", str(timings)]
        print(f"exporting to S3 ({args.format}, {args.compression}, 8 MiB parts) …", flush=True)
        result = measure(cmd, env=env)
        if result.error:
            print(result.error, file=sys.stderr)
            return 1
        client = server.client()
        listed = client.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]
        manifest = json.loads(client.get_object(Bucket=bucket, Key="run/manifest.json")["Body"]
                              .read())
    size = sum(o["Size"] for o in listed if not o["Key"].endswith(("manifest.json", "_SUCCESS")))
    parts = sum(f["parts"] for f in manifest["files"])
    print(f"rows           {manifest['total_rows']:,}")
    print(f"object bytes   {size / 1e6:,.1f} MB in {len(manifest['files'])} file(s), {parts} parts")
    print(f"wall time      {result.seconds:.1f} s ({size / 1e6 / result.seconds:.1f} MB/s)")
    print(f"peak RSS       {result.peak_rss_mb:.0f} MB (limit {RSS_LIMIT_MB} MB)")
    return 0 if result.peak_rss_mb < RSS_LIMIT_MB else 2


if __name__ == "__main__":
    sys.exit(main())

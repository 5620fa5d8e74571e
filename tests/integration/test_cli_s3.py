"""``egress export --out s3://bucket/prefix`` against the real S3-protocol server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobsharness import make_events_db


def test_cli_exports_to_s3_and_prints_where(tmp_path: Path, s3) -> None:
    source = make_events_db(tmp_path / "src.db", {"t": 4_000})
    out = s3.url("cli")
    result = subprocess.run(
        [sys.executable, "-m", "egress.cli", "export", "--source", source, "--table", "t",
         "--format", "jsonl", "--compression", "gzip", "--out", out, "--part-rows", "1000"],
        capture_output=True, text=True, env=dict(os.environ), timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"Manifest: {out}/manifest.json" in result.stdout
    assert set(s3.objects("cli/")) == {"t.jsonl.gz", "manifest.json", "_SUCCESS"}
    assert s3.uploads("cli/") == []

"""A Trino warehouse as the tests see it: the protocol server of tests/trino_protocol.py
playing a catalog ``memory.default`` with a few tables, answering the statements egress
sends (information_schema listings, ``SELECT * FROM "memory"."default"."t"``, the
``system.unload`` table function writing real Parquet files). Fixtures in
tests/integration/trino/conftest.py."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from egress.config import RemoteSettings
from egress.sources.trino_types import column, to_batch
from trino_protocol import EngineError, Result, TrinoProtocolServer

#: Fibonacci poll delays scaled down 100× (2 s → 20 ms): the same sequence, fast tests.
SCALE = 0.01

COLUMNS = [("id", "bigint"), ("name", "varchar"), ("price", "decimal(10,2)"),
           ("at", "timestamp(3)")]


def rows(n: int, start: int = 1) -> list[list[Any]]:
    return [[i, f"name {i}, \"q\"", f"{i % 1000}.{i % 100:02d}",
             f"2026-11-{1 + i % 28:02d} 10:00:00.{i % 1000:03d}"] for i in range(start, start + n)]


class Warehouse:
    """Tables of the fake catalog and the responders that answer egress's statements."""

    def __init__(self, server: TrinoProtocolServer) -> None:
        self.server = server
        self.tables: dict[str, Result] = {}
        self.unload_available = True
        server.respond(r"information_schema\.tables", self._tables)
        server.respond(r"information_schema\.columns", self._columns)
        server.respond(r"system\.unload", self._unload)
        server.respond(r'FROM "memory"\."default"\."([^"]+)"', self._select)

    def add(self, name: str, data: list[list[Any]], columns: list[tuple[str, str]] | None = None
            ) -> None:
        self.tables[name] = Result(columns=list(columns or COLUMNS), rows=data)

    def _tables(self, sql: str, headers: Mapping[str, str]) -> Result:
        assert "table_schema = 'default'" in sql
        return Result(columns=[("table_name", "varchar")],
                      rows=[[n] for n in sorted(self.tables)])

    def _columns(self, sql: str, headers: Mapping[str, str]) -> Result:
        m = re.search(r"table_name = '((?:[^']|'')*)'", sql)
        assert m is not None
        table = self.tables[m.group(1).replace("''", "'")]
        return Result(columns=[("column_name", "varchar"), ("data_type", "varchar")],
                      rows=[[n, t] for n, t in table.columns])

    def _table_of(self, sql: str) -> Result:
        m = re.search(r'FROM "memory"\."default"\."((?:[^"]|"")+)"', sql)
        if m is None or m.group(1).replace('""', '"') not in self.tables:
            raise EngineError("line 1:15: Table does not exist", "TABLE_NOT_FOUND",
                              "USER_ERROR", 46)
        return self.tables[m.group(1).replace('""', '"')]

    def _select(self, sql: str, headers: Mapping[str, str]) -> Result:
        return self._table_of(sql)

    def _unload(self, sql: str, headers: Mapping[str, str]) -> Result:
        """Starburst's system.unload: write the input as Parquet files at the location."""
        if not self.unload_available:
            raise EngineError("line 1:21: Table function 'system.unload' not registered",
                              "FUNCTION_NOT_FOUND", "USER_ERROR", 6)
        table = self._table_of(sql)
        m = re.search(r"location => '((?:[^']|'')*)'", sql)
        assert m is not None and "format => 'PARQUET'" in sql
        location = m.group(1).replace("''", "'")
        cols = [column(n, t) for n, t in table.columns]
        half = max(1, len(table.rows) // 2)
        written = []
        for i, chunk in enumerate((table.rows[:half], table.rows[half:])):
            if not chunk:
                continue
            data = pa.Table.from_batches([to_batch(cols, chunk)])
            name = f"part-{i:05d}.parquet"
            self._write(location + name, data)
            written.append([location + name, len(chunk)])
        return Result(columns=[("path", "varchar"), ("count", "bigint")], rows=written)

    def _write(self, url: str, table: pa.Table) -> None:
        parts = urlsplit(url)
        if parts.scheme == "file":
            path = Path(unquote(parts.path))
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
        else:
            import io

            import boto3

            buffer = io.BytesIO()
            pq.write_table(table, buffer)
            s3 = boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
            s3.put_object(Bucket=parts.netloc, Key=parts.path.lstrip("/"),
                          Body=buffer.getvalue())

    s3_endpoint: str | None = None


def trino_url(server: TrinoProtocolServer, user: str = "alice") -> str:
    port = urlsplit(server.url).port
    return f"trino://{user}@127.0.0.1:{port}/memory/default"


def fast_remote(**changes: Any) -> RemoteSettings:
    base = RemoteSettings()
    values: dict[str, Any] = {
        "poll_delays": tuple(d * SCALE for d in base.poll_delays),
        "poll_pass_seconds": 0.02, "first_call_timeout": 2.0, "first_call_wait": 0.05,
    }
    values.update(changes)
    return dataclasses.replace(base, **values)



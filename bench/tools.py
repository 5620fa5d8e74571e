"""The sources' own tools, as commands that write one file of the same rows.

- SQLite: the ``sqlite3`` shell (``-csv -header``, ``-json``, ``.dump``).
- PostgreSQL: ``psql -c "\\copy … CSV HEADER"`` and ``pg_dump --inserts``.
- Parquet: DuckDB ``COPY … TO 'f.parquet'`` reading the same SQLite file / PostgreSQL
  table through its sqlite/postgres scanner extensions. Those come only as PyPI wheels
  pinned to DuckDB 1.5.5, so they live in a virtualenv of their own (built on first use)
  and leave egress's own DuckDB alone. And connectorx (``read_sql(…, return_type=
  "arrow")``, the whole table in memory) + ``pyarrow.parquet.write_table``, in the same
  virtualenv, with four partitions on ``id`` (see ``_CONNECTORX_SCRIPT``).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DUCKDB_VERSION = "1.5.5"
DUCKDB_PACKAGES = (
    f"duckdb=={DUCKDB_VERSION}",
    f"duckdb-extension-sqlite-scanner=={DUCKDB_VERSION}",
    f"duckdb-extension-postgres-scanner=={DUCKDB_VERSION}",
    "connectorx",
    "pyarrow",
)
DEFAULT_DUCKDB_ENV = Path.home() / ".cache" / "egress-bench" / f"duckdb-{DUCKDB_VERSION}"

# Run by the DuckDB virtualenv's Python: argv = kind, source, table, out file, codec.
_DUCKDB_SCRIPT = """
import glob, os, sys, importlib
import duckdb
kind, source, table, out, codec = sys.argv[1:]
module = importlib.import_module(f"duckdb_extension_{kind}_scanner")
(path,) = glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*",
                                 "*.duckdb_extension"))
con = duckdb.connect()
con.execute(f"LOAD '{path}'")
con.execute(f"ATTACH '{source}' AS src (TYPE {kind}, READ_ONLY)")
schema = ".public" if kind == "postgres" else ""
con.execute(f"COPY (SELECT * FROM src{schema}.{table}) TO '{out}' "
            f"(FORMAT parquet, COMPRESSION {codec})")
"""


# Run by the same virtualenv's Python: argv = source URL, table, out file, codec.
# Four partitions on the key (connectorx's parallel read): from SQLite, connectorx types a
# column whose declared type it does not map (``amount NUMERIC(12,2)``) by the first row
# of a partition, and refuses a NULL there unless another partition's first row has a
# value. The table's first row has none, so one partition fails ("Cannot infer type from
# null for SQLite": the tool had dropped out of every run since version 2 of the table);
# with four, the second partition's first row has one.
_CONNECTORX_SCRIPT = """
import sys
import connectorx as cx
import pyarrow.parquet as pq
url, table, out, codec = sys.argv[1:]
pq.write_table(cx.read_sql(url, f"SELECT * FROM {table}", return_type="arrow",
                           partition_on="id", partition_num=4), out, compression=codec)
"""


@dataclass(frozen=True)
class Tool:
    """A command that writes ``out``; ``stdout`` says whether it writes it on stdout."""

    name: str
    argv: list[str]
    out: Path
    stdout: bool = False


def ensure_duckdb_env(env: Path) -> Path:
    """The Python of a virtualenv holding DuckDB and its scanner extensions."""
    python = env / "bin" / "python"
    probe = [str(python), "-c", "import duckdb, duckdb_extension_sqlite_scanner, "
             "duckdb_extension_postgres_scanner, connectorx, pyarrow; "
             "print(duckdb.__version__)"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"  creating {env} with {', '.join(DUCKDB_PACKAGES)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *DUCKDB_PACKAGES], check=True)
    subprocess.run(probe, check=True, capture_output=True)
    return python


def _libpq_dsn(url: str) -> str:
    parts = urlsplit(url)
    return (f"host={parts.hostname} port={parts.port or 5432} "
            f"user={parts.username or 'postgres'} dbname={parts.path.lstrip('/')}")


def csv_tool(kind: str, source: str, table: str, out: Path, gzip: bool = False) -> Tool:
    """The source's CLI writing CSV with a header (piped through ``gzip -6`` if asked)."""
    if kind == "sqlite":
        argv = ["sqlite3", "-csv", "-header", source, f"SELECT * FROM {table}"]
        name = "sqlite3 -csv"
    else:
        target = "STDOUT" if gzip else f"'{out}'"
        argv = ["psql", "-X", "-q", "-d", source, "-c", f"\\copy {table} TO {target} CSV HEADER"]
        name = "psql \\copy"
    if gzip:
        pipeline = f"{shlex.join(argv)} | gzip -6 > {shlex.quote(str(out))}"
        return Tool(f"{name} | gzip", ["bash", "-o", "pipefail", "-c", pipeline], out)
    return Tool(name, argv, out, stdout=kind == "sqlite")


def json_tool(kind: str, source: str, table: str, out: Path) -> Tool | None:
    if kind == "sqlite":
        return Tool("sqlite3 -json", ["sqlite3", "-json", source, f"SELECT * FROM {table}"],
                    out, stdout=True)
    return None  # psql has no JSON output of its own


def sql_tool(kind: str, source: str, table: str, out: Path) -> Tool:
    if kind == "sqlite":
        return Tool("sqlite3 .dump", ["sqlite3", source, f".dump {table}"], out, stdout=True)
    argv = ["pg_dump", "-d", source, "-t", table, "--inserts", "--rows-per-insert=500",
            "-f", str(out)]
    return Tool("pg_dump --inserts", argv, out)


def duckdb_tool(
    python: Path, kind: str, source: str, table: str, out: Path, codec: str
) -> Tool:
    """DuckDB ``COPY (SELECT * FROM …) TO out (FORMAT parquet, COMPRESSION codec)``."""
    attach = source if kind == "sqlite" else _libpq_dsn(source)
    scanner = "sqlite" if kind == "sqlite" else "postgres"
    argv = [str(python), "-c", _DUCKDB_SCRIPT, scanner, attach, table, str(out), codec]
    return Tool(f"DuckDB COPY parquet ({codec})", argv, out)


def connectorx_tool(python: Path, url: str, table: str, out: Path, codec: str) -> Tool:
    """connectorx reading the table into Arrow, pyarrow writing it with ``codec``."""
    argv = [str(python), "-c", _CONNECTORX_SCRIPT, url, table, str(out), codec]
    return Tool(f"connectorx+pyarrow ({codec})", argv, out)


def versions(duckdb_python: Path | None) -> dict[str, str]:
    """Versions of the tools, for the report."""
    def first_line(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except OSError:
            return "not found"
        return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 \
            else "not found"

    found = {
        "sqlite3": first_line(["sqlite3", "--version"]).split(" ")[0],
        "psql": first_line(["psql", "--version"]).removeprefix("psql (PostgreSQL) "),
    }
    if duckdb_python is not None:
        found["duckdb"] = first_line([str(duckdb_python), "-c",
                                      "import duckdb; print(duckdb.__version__)"])
        found["connectorx"] = first_line([str(duckdb_python), "-c",
                                          "import connectorx; print(connectorx.__version__)"])
    return found

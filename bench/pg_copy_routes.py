"""Client CPU of the ways to stream PostgreSQL's own CSV (issue #12, item 3).

    flock /tmp/egress-bench.lock .venv/bin/python bench/pg_copy_routes.py [--rows 1000000]

Each route writes the table's CSV into one file in a fresh Python process (psycopg only,
no egress imports) and reports wall seconds, the client's CPU seconds and the server
backend's CPU seconds (``/proc/PID/stat`` of the backend): the budget a
``--csv-dialect postgres`` export has to fit in. ``psql \\copy`` runs in turns with them.

Routes:

- ``iter``: ``for chunk in copy`` (psycopg's ``Copy`` iteration: one CopyData message,
  one row, per step through psycopg's generator machinery), one COPY of the whole table;
- ``pgconn``: the same COPY read by ``pgconn.get_copy_data`` in a tight loop (libpq's
  call, one row per call, no generator), rows counted as messages;
- ``buffer``: ``pgconn`` with each part's rows (``--part-rows``) appended to one
  ``bytearray`` and written as one ``bytes``: egress's loop since session 20 (``pgconn``
  keeps a list of rows and joins it every 8 MiB);
- ``discard``: ``get_copy_data`` in a loop, nothing kept or written: the floor of any
  reader in Python on libpq;
- ``mandated``: ``buffer`` plus what every export must do per part (CRC32C, write and
  ``fsync``, SHA-256 on threads as egress's committer and hasher): egress without its
  engine;
- ``seq``: ``pgconn`` without ``ORDER BY`` (a sequential scan, as ``psql \\copy`` of
  the table does): what the key order costs the server;
- ``jsonl``: ``pgconn`` for ``COPY (SELECT row_to_json(e) FROM (…) AS e) TO STDOUT
  (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')``: the server writes JSON Lines (a
  JSON text holds no raw control character, so no field is quoted);
- ``parts``: one COPY per part of ``--part-rows`` rows (``WHERE id > a AND id <= b``),
  ``b`` found first by an index-only ``OFFSET part_rows - 1`` query, the rows of a part
  from the COPY's command tag, read by ``pgconn.get_copy_data``: what egress builds;
- ``blocks``: the ``pgconn`` COPY read by asyncpg's ``copy_from_query``, whose protocol
  (Cython) hands over every CopyData message in its buffer as one bytes object, so no
  Python step runs per row; the rows of each block are found as numpy counts them: the
  newlines outside quotes (a quote's parity carried from block to block), whose byte
  offsets are where parts could be cut. Runs in the DuckDB bench environment's Python
  (``--blocks-python``), where asyncpg and numpy are installed if missing.
"""

# ruff: noqa: E501  (the child program is one long string)
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import data
import tools

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("/tmp/egress-bench/routes.csv")

# Both child programs start so: argv = url, out file[, …]; the table's CSV goes to fd.
PRELUDE = r"""
import os, sys, time
def backend_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
started = time.perf_counter()
url, out = sys.argv[1], sys.argv[2]
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
FIELDS = "id, user_id, created_at, kind, amount, payload, flag"
"""

COMMON = PRELUDE + r"""
import psycopg
from psycopg import pq
route, part_rows = sys.argv[3], int(sys.argv[4])
conn = psycopg.connect(url, autocommit=True)
pid = conn.info.backend_pid
server0 = backend_cpu(pid)
conn.execute("SET enable_sort = off")  # ORDER BY key by the index, never a sort
conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
rows = 0

def pump(pgconn, limit_bytes=8 << 20):
    # one COPY's rows, written in blocks of about 8 MiB; returns rows seen
    n, buf, size = 0, [], 0
    get = pgconn.get_copy_data
    while True:
        nbytes, chunk = get(0)
        if nbytes <= 0:
            break
        buf.append(chunk)
        size += nbytes
        n += 1
        if size >= limit_bytes:
            os.write(fd, b"".join(buf)); buf, size = [], 0
    if buf:
        os.write(fd, b"".join(buf))
    return n

def parts(pgconn, part_rows):
    # egress's loop (sources/pg_copy.py): each part's rows appended to one bytearray;
    # yields (part bytes, rows)
    get, ended = pgconn.get_copy_data, False
    while not ended:
        buf, n = bytearray(), 0
        for _ in range(part_rows):
            nbytes, chunk = get(0)
            if nbytes <= 0:
                ended = True
                break
            buf += chunk
            n += 1
        yield bytes(buf), n

def pump_parts(pgconn, part_rows):
    n = 0
    for data, rows in parts(pgconn, part_rows):
        os.write(fd, data)
        n += rows
    return n

def pump_discard(pgconn):
    # the floor of any reader in Python on libpq: a call per row, nothing kept or written
    n, get = 0, pgconn.get_copy_data
    while get(0)[0] > 0:
        n += 1
    return n

def pump_mandated(pgconn, part_rows):
    # what every export must do, without egress's engine: pump_parts, and on a thread
    # each a part's CRC32C, write and fsync, and its SHA-256 (as egress's committer and
    # hashing threads do)
    import hashlib
    from concurrent.futures import ThreadPoolExecutor
    import google_crc32c
    sha, offset, n = hashlib.sha256(), 0, 0
    def commit(data, at):
        google_crc32c.value(data)
        os.pwrite(fd, data, at)
        os.fsync(fd)
    with ThreadPoolExecutor(1) as committer, ThreadPoolExecutor(1) as hasher:
        pending = []
        for data, rows in parts(pgconn, part_rows):
            n += rows
            for f in pending:
                f.result()  # one part in flight, as egress's committer
            pending = [committer.submit(commit, data, offset), hasher.submit(sha.update, data)]
            offset += len(data)
        for f in pending:
            f.result()
    return n

if route == "iter":
    with conn.cursor().copy(f"COPY (SELECT {FIELDS} FROM events ORDER BY id) TO STDOUT (FORMAT csv, HEADER)") as copy:
        buf, size = [], 0
        for chunk in copy:
            buf.append(chunk); size += len(chunk); rows += 1
            if size >= 8 << 20:
                os.write(fd, b"".join(buf)); buf, size = [], 0
        if buf:
            os.write(fd, b"".join(buf))
elif route in ("pgconn", "seq", "buffer", "discard", "mandated"):
    pgconn = conn.pgconn
    order = "ORDER BY id" if route != "seq" else ""
    pgconn.send_query(f"COPY (SELECT {FIELDS} FROM events {order}) TO STDOUT (FORMAT csv, HEADER)".encode())
    res = pgconn.get_result()
    assert res.status == pq.ExecStatus.COPY_OUT, res.status
    if route == "discard":
        rows = pump_discard(pgconn)
    elif route == "mandated":
        rows = pump_mandated(pgconn, part_rows)
    else:
        rows = pump(pgconn) if route != "buffer" else pump_parts(pgconn, part_rows)
    res = pgconn.get_result()
    assert res.status == pq.ExecStatus.COMMAND_OK, res.error_message
    while pgconn.get_result() is not None:
        pass
elif route == "jsonl":
    pgconn = conn.pgconn
    pgconn.send_query(("COPY (SELECT row_to_json(e) FROM (SELECT " + FIELDS + " FROM events ORDER BY id) AS e) TO STDOUT (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')").encode())
    res = pgconn.get_result()
    assert res.status == pq.ExecStatus.COPY_OUT, (res.status, res.error_message)
    rows = pump(pgconn)
    res = pgconn.get_result()
    assert res.status == pq.ExecStatus.COMMAND_OK, res.error_message
    while pgconn.get_result() is not None:
        pass
elif route == "parts":
    pgconn = conn.pgconn
    after = None
    first = True
    while True:
        where = "" if after is None else f"WHERE id > {int(after)}"
        got = conn.execute(f"SELECT id FROM events {where} ORDER BY id OFFSET {part_rows - 1} LIMIT 1").fetchone()
        upper = "" if got is None else (" AND " if where else "WHERE ") + f"id <= {int(got[0])}"
        header = ", HEADER" if first else ""
        first = False
        pgconn.send_query(f"COPY (SELECT {FIELDS} FROM events {where}{upper} ORDER BY id) TO STDOUT (FORMAT csv{header})".encode())
        res = pgconn.get_result()
        assert res.status == pq.ExecStatus.COPY_OUT, res.status
        n = pump(pgconn)
        res = pgconn.get_result()
        assert res.status == pq.ExecStatus.COMMAND_OK, res.error_message
        tag_rows = int(res.command_tuples or 0)
        while pgconn.get_result() is not None:
            pass
        rows += tag_rows
        if got is None:
            break
        after = got[0]
server = backend_cpu(pid) - server0
conn.execute("COMMIT")
conn.close()
os.fsync(fd)
os.close(fd)
print(f"{rows} {server:.2f} {time.process_time():.2f} {time.perf_counter() - started:.2f}")
"""


BLOCKS = PRELUDE + r"""
import asyncio
import asyncpg
import numpy as np
state = {"rows": 0, "quotes": 0, "buf": [], "size": 0}

def row_ends(block):
    # byte offsets just past each row's end in block: the LFs outside quotes
    a = np.frombuffer(block, np.uint8)
    quotes = np.flatnonzero(a == 34)
    lfs = np.flatnonzero(a == 10)
    outside = ((np.searchsorted(quotes, lfs) + state["quotes"]) & 1) == 0
    state["quotes"] += len(quotes)
    return lfs[outside] + 1

async def sink(block):
    state["rows"] += len(row_ends(block))
    state["buf"].append(block)
    state["size"] += len(block)
    if state["size"] >= 8 << 20:
        os.write(fd, b"".join(state["buf"])); state["buf"], state["size"] = [], 0

async def main():
    conn = await asyncpg.connect(url)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    server0 = backend_cpu(pid)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute("SET LOCAL enable_sort = off")
        await conn.copy_from_query(f"SELECT {FIELDS} FROM events ORDER BY id",
                                   output=sink, format="csv", header=True)
    server = backend_cpu(pid) - server0
    await conn.close()
    return server

server = asyncio.run(main())
if state["buf"]:
    os.write(fd, b"".join(state["buf"]))
os.fsync(fd)
os.close(fd)
print(f"{state['rows'] - 1} {server:.2f} {time.process_time():.2f} {time.perf_counter() - started:.2f}")
"""


def blocks_python(python: Path) -> Path:
    """``python`` (a bench virtualenv's), with asyncpg and numpy installed if missing."""
    probe = [str(python), "-c", "import asyncpg, numpy"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "asyncpg", "numpy"],
                       check=True)
    return python


def timed(argv: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--part-rows", type=int, default=27_000)
    parser.add_argument("--routes", default="iter,pgconn,parts")
    parser.add_argument("--blocks-python", type=Path,
                        default=tools.DEFAULT_DUCKDB_ENV / "bin" / "python")
    args = parser.parse_args()
    routes = args.routes.split(",")
    if "blocks" in routes:
        blocks = blocks_python(args.blocks_python)
    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import running_server  # the tests' throwaway server

    OUT.parent.mkdir(parents=True, exist_ok=True)
    with running_server() as server:
        url = data.load_postgres(server.url, f"bench_{args.rows}", args.rows)
        psql = ["psql", url, "-c", f"\\copy (SELECT * FROM events) TO '{OUT}' CSV HEADER"]
        timed(psql)  # warm the table
        print(f"load average {os.getloadavg()}")
        for _ in range(args.repeat):
            wall, cpu, _out = timed(psql)
            print(f"psql \\copy: wall {wall:.2f} s, psql CPU {cpu:.2f} s", flush=True)
            for route in routes:
                argv = ([str(blocks), "-c", BLOCKS, url, str(OUT)] if route == "blocks" else
                        [sys.executable, "-c", COMMON, url, str(OUT), route,
                         str(args.part_rows)])
                wall, cpu, out = timed(argv)
                rows, server_cpu, _cpu, _wall = out.split()
                print(f"{route:>7}: wall {wall:.2f} s, client CPU {cpu:.2f} s, "
                      f"server backend CPU {server_cpu} s, {rows} rows", flush=True)
        print(f"load average {os.getloadavg()}")
    OUT.unlink(missing_ok=True)


if __name__ == "__main__":
    main()

"""HTTP API latency at a fixed request rate: create and status on loopback.

    .venv/bin/python bench/api_latency.py                  # 200 req/s for 20 s, 2 workers
    .venv/bin/python bench/api_latency.py --workers 4 --store postgresql
    .venv/bin/python bench/api_latency.py --embedded       # the API's embedded worker
    .venv/bin/python bench/api_latency.py --workers 0      # API only: exports stay queued
    .venv/bin/python bench/api_latency.py --rate 400 --seconds 10 --create-share 0.5
    .venv/bin/python bench/api_latency.py --workers 2 --worker-nice 19   # workers yield the CPU
    .venv/bin/python bench/api_latency.py --store postgresql --trace /tmp/t \
        --pg-setting shared_preload_libraries=pg_stat_statements     # per-request trace etc.

Runs egress as it is deployed: ``egress serve --no-worker`` answers the requests and
``--workers N`` separate ``egress worker`` processes run the exports (``--embedded``: the
API process runs them in its embedded worker instead). The home is fresh, with the
embedded defaults (a SQLite store, local files) and a 200-row SQLite table; the per-token
rate limit and the per-project cap on queued/running exports (``api.max_active_exports``)
are lifted far above what the bench sends, since it measures latency, not the limits.
Then one asyncio client sends, on 127.0.0.1, ``POST /v1/exports`` (the share
``--create-share``) and ``GET /v1/exports/{id}`` of a recent export.

The load is an open loop: request *i* is due at ``start + i / rate`` whether or not
earlier ones have answered, and its latency counts from that moment, so a server that
falls behind (or a client late to send) shows in the figures instead of slowing the
load (no coordinated omission). The client is a minimal HTTP/1.1 client over asyncio
streams with a pool of keep-alive connections, opening another connection whenever all
are busy: it costs a fraction of httpx's CPU, which shares the same cores as the server
(``--client httpx`` for comparison). Prints p50/p90/p99/max per operation, the rate
achieved, CPU per request of the API process, the workers, PostgreSQL and the client, and any
errors. Target: p99 < 50 ms. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TARGET_P99_MS = 50.0
#: Connections the client keeps at most; beyond, a request waits (and its wait counts).
MAX_CONNECTIONS = 256
#: A client connection idle this long is closed, not reused (the server's limit is 5 s).
IDLE_SECONDS = 2.0
BODY = {"source": "main", "tables": ["items"], "format": "csv"}


@dataclass
class Results:
    #: operation → latencies in seconds (from when the request was due to its answer)
    latency: dict[str, list[float]] = field(default_factory=dict)
    #: operation → {status code or exception name: count} for unexpected answers
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    #: how late the client sent each request (its own lag, included in latency)
    lag: list[float] = field(default_factory=list)
    finished_at: float = 0.0
    #: CPU seconds used while measured, by role (api, workers, client)
    cpu: dict[str, float] = field(default_factory=dict)
    #: (due, op, latency seconds, problem) of every measured request, for ``--trace``
    trace: list[tuple[float, str, float, str]] = field(default_factory=list)

    def record(self, op: str, seconds: float, problem: str | None, due: float = 0.0) -> None:
        self.latency.setdefault(op, []).append(seconds)
        self.trace.append((due, op, seconds, problem or ""))
        if problem is not None:
            counts = self.errors.setdefault(op, {})
            counts[problem] = counts.get(problem, 0) + 1


# --- processes -------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of a process and its reaped children."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's worker processes)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            children = []
        todo += [int(c) for c in children]
    return found


def postmaster(datadir: Path) -> int:
    """The PostgreSQL server's pid (its backends are its children)."""
    return int((datadir / "data" / "postmaster.pid").read_text().split()[0])


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_home(root: Path, store_url: str | None = None, api_threads: int | None = None
              ) -> Path:
    """A fresh home: a 200-row SQLite source named ``main``, the store at ``store_url``
    (default: the embedded SQLite store), everything else default."""
    src = root / "source.db"
    conn = sqlite3.connect(src)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    conn.executemany("INSERT INTO items VALUES (?, ?, ?)",
                     [(i, f"item {i}", i * 1.5) for i in range(1, 201)])
    conn.commit()
    conn.close()
    home = root / "home"
    home.mkdir()
    (home / "egress.toml").write_text(
        (f'[store]\nurl = "{store_url}"\n\n' if store_url else "")
        + f'[sources.main]\nurl = "sqlite:///{src}"\n\n'
        # The bench measures latency, not the limits: lift the per-token rate limit and
        # the per-project cap on queued/running exports far above what it sends.
        "[api]\nrate_limit_per_second = 100000.0\nrate_limit_burst = 100000\n"
        "max_active_exports = 1000000\n"
        + (f"threads = {api_threads}\n" if api_threads else "")
    )
    return home


def egress_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}


def cli(home: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "egress.cli", *args, "--home", str(home)],
                          env=egress_env(), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"egress {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def create_token(home: Path) -> str:
    out = cli(home, "tokens", "create", "--project", "bench",
              "--scopes", "exports:read,exports:create", "--json")
    return str(json.loads(out)["token"])


def spawn(args: list[str], log: Path, nice: int = 0) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "egress.cli", *args], env=egress_env(),
                                stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=(lambda: os.nice(nice)) if nice else None)


def start_server(home: Path, port: int, log: Path, embedded: bool, processes: int = 1
                 ) -> subprocess.Popen[bytes]:
    return spawn(["serve", "--home", str(home), "--host", "127.0.0.1", "--port", str(port),
                  "--log-level", "WARNING", "--processes", str(processes),
                  *([] if embedded else ["--no-worker"])], log)


def start_workers(home: Path, n: int, log: Path, nice: int = 0
                  ) -> list[subprocess.Popen[bytes]]:
    return [spawn(["worker", "--home", str(home), "--log-level", "WARNING"], log, nice)
            for _ in range(n)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"egress serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("egress serve did not answer /healthz in time")


# --- clients ---------------------------------------------------------------------------

class ClientError(Exception):
    pass


Send = Callable[[str, str, bytes | None], Awaitable[tuple[int, bytes]]]


class RawClient:
    """Just enough HTTP/1.1 for this bench: keep-alive connections, Content-Length
    bodies (every answer of these routes has one). A connection idle longer than
    :data:`IDLE_SECONDS` is closed rather than reused: the server closes idle ones after
    5 s (uvicorn's keep-alive timeout) and a request on a closing connection would be
    lost (a real client retries it; this one never meets the case)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        #: (reader, writer, idle since) — the most recently used last
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        now = time.monotonic()
        while self.idle:
            reader, writer, since = self.idle.pop()
            if now - since < IDLE_SECONDS and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    async def send(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        async with self.slots:
            reader, writer = await self._connection()
            try:
                extra = (f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                         if body is not None else "")
                writer.write(f"{method} {path} HTTP/1.1\r\n{self.head}{extra}\r\n".encode()
                             + (body or b""))
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ", 2)[1])
                length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                               if line[:15].lower() == "content-length:"), None)
                if length is None:
                    raise ClientError("an answer without Content-Length")
                data = await reader.readexactly(length)
            except BaseException:
                writer.close()
                raise
            self.idle.append((reader, writer, time.monotonic()))
            return status, data

    async def close(self) -> None:
        for _, writer, _ in self.idle:
            writer.close()


async def run_load(base: str, token: str, rate: float, seconds: float, create_share: float,
                   warmup: float, kind: str, pids: dict[str, list[int]]) -> tuple[Results, float]:
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps(BODY).encode()
    httpx_client = None
    if kind == "httpx":
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS,
                              max_keepalive_connections=MAX_CONNECTIONS)
        httpx_client = httpx.AsyncClient(base_url=base, limits=limits, timeout=30,
                                         headers={"Authorization": f"Bearer {token}"})

        async def send(method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
            assert httpx_client is not None
            r = await httpx_client.request(method, path, content=data, headers=(
                {"Content-Type": "application/json"} if data is not None else None))
            return r.status_code, r.content
        close = httpx_client.aclose
        failures: tuple[type[BaseException], ...] = (httpx.HTTPError,)
    else:
        raw = RawClient(host, int(port), token)
        send, close = raw.send, raw.close
        failures = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ClientError, ValueError)
    results, rng, ids = Results(), random.Random(7), []

    async def create() -> str | None:
        status, data = await send("POST", "/v1/exports", body)
        if status != 202:
            return str(status)
        ids.append(json.loads(data)["id"])
        return None

    async def show() -> str | None:
        # a recent export: the ones a client would be watching
        status, _ = await send("GET", f"/v1/exports/{rng.choice(ids[-200:])}", None)
        return None if status == 200 else str(status)

    try:
        for _ in range(10):  # something to ask the status of, and a warm connection
            if await create():
                raise SystemExit("POST /v1/exports failed before the load started")

        async def one(op: str, due: float, record: bool) -> None:
            try:
                problem = await (create() if op == "create" else show())
            except failures as exc:
                problem = type(exc).__name__
            if record:
                results.record(op, time.perf_counter() - due, problem, due)
                results.finished_at = max(results.finished_at, time.perf_counter())

        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter() + 0.05
        measured_from = start + warmup
        cpu_start: dict[str, float] | None = None
        for i in range(int((warmup + seconds) * rate)):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            record = due >= measured_from
            if record:
                if cpu_start is None:
                    cpu_start = cpu_by_role(pids)
                results.lag.append(max(0.0, time.perf_counter() - due))
            op = "create" if rng.random() < create_share else "status"
            tasks.append(asyncio.create_task(one(op, due, record)))
        await asyncio.gather(*tasks)
        if cpu_start is not None:
            end = cpu_by_role(pids)
            results.cpu = {role: end[role] - cpu_start[role] for role in end}
    finally:
        await close()
    return results, measured_from


class _Sampler:
    """Collects ``rows`` on a thread of its own while the ``with`` block runs."""

    def __init__(self, every: float) -> None:
        import threading

        self.every = every
        self.rows: list[tuple[Any, ...]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class WaitSampler(_Sampler):
    """``--trace``: samples PostgreSQL's ``pg_stat_activity`` every few ms on its own
    thread (the sessions that are not idle, their wait events and how long their
    statement has run), to be lined up with the requests' latencies."""

    def __init__(self, url: str, every: float = 0.01) -> None:
        super().__init__(every)
        self.url = url

    def _run(self) -> None:
        import psycopg

        query = ("SELECT pid, backend_type, state, wait_event_type, wait_event, "
                 "extract(epoch from clock_timestamp() - query_start) * 1000, "
                 "left(regexp_replace(query, '\\s+', ' ', 'g'), 100) "
                 "FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                 "AND coalesce(state, '') NOT IN ('idle')")
        with psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql"),
                             autocommit=True) as conn:
            while not self._stop.wait(self.every):
                at = time.perf_counter()
                for row in conn.execute(query).fetchall():
                    self.rows.append((at, *row))


class CpuSampler(_Sampler):
    """``--trace``: CPU seconds used so far by each role and by the whole machine,
    every 10 ms on its own thread: tells a stall in which the API was busy from one in
    which it was starved (other processes running) or idle (waiting)."""

    def __init__(self, pids: dict[str, list[int]], every: float = 0.01) -> None:
        super().__init__(every)
        self.pids = pids

    def _run(self) -> None:
        roles = list(self.pids)
        while not self._stop.wait(self.every):
            at = time.perf_counter()
            used = [sum(cpu_seconds(p) for pid in self.pids[r] for p in tree(pid))
                    for r in roles]
            self.rows.append((at, machine_busy(), *used))


def write_trace(folder: Path, results: Results, start: float,
                sampler: WaitSampler | None, cpu: CpuSampler | None = None) -> None:
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "requests.csv", "w", newline="") as f:
        out = csv.writer(f)
        # due_s: from the start of the measured part (perf_counter there: the first row)
        out.writerow(["due_s", "op", "latency_ms", "problem"])
        out.writerow([f"{start:.4f}", "start", "", ""])
        for due, op, seconds, problem in sorted(results.trace):
            out.writerow([f"{due - start:.4f}", op, f"{seconds * 1e3:.2f}", problem])
    if cpu is not None:
        with open(folder / "cpu.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["at_s", "machine", *cpu.pids])
            for at, *used in cpu.rows:
                out.writerow([f"{at - start:.4f}", *(f"{u:.2f}" for u in used)])
    if sampler is not None:
        with open(folder / "waits.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["at_s", "pid", "backend", "state", "wait_type", "wait_event",
                          "running_ms", "query"])
            for at, *row in sampler.rows:
                out.writerow([f"{at - start:.4f}", *row])


def write_statements(path: Path, url: str) -> None:
    """The statements that took the server's time (``pg_stat_statements``; the
    extension must be preloaded: ``--pg-setting shared_preload_libraries=…``)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn, open(path, "w") as out:
        rows = conn.execute(
            "SELECT total_exec_time, calls, mean_exec_time, rows, shared_blks_hit, "
            "regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "ORDER BY total_exec_time DESC LIMIT 25").fetchall()
        for total, calls, mean, nrows, hits, query in rows:
            out.write(f"{total:10.1f} ms total {calls:7d} calls {mean:8.3f} ms mean "
                      f"{nrows:8d} rows {hits:10d} buffer hits\n    {query[:1500]}\n")


def cpu_by_role(pids: dict[str, list[int]]) -> dict[str, float]:
    out = {role: sum(cpu_seconds(p) for pid in procs for p in tree(pid))
           for role, procs in pids.items()}
    out["client"] = client_cpu()
    # the rest of the machine (other processes sharing the cores): busy time of every CPU
    # in /proc/stat minus the roles above, computed as a difference by the caller
    out["other"] = machine_busy() - sum(out.values())
    return out


def machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (not idle, not waiting for I/O)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal …: busy = all − idle − iowait
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# --- report ----------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def report(results: Results, measured_from: float, rate: float, seconds: float,
           setup: str) -> bool:
    n = sum(len(v) for v in results.latency.values())
    took = results.finished_at - measured_from
    print(f"\n{setup}")
    print(f"asked {rate:.0f} req/s for {seconds:.0f} s; answered {n} requests in "
          f"{took:.1f} s = {n / took:.1f} req/s achieved")
    print(f"client lag: p50 {pct(results.lag, 50) * 1e3:.2f} ms, "
          f"p99 {pct(results.lag, 99) * 1e3:.2f} ms (included in the latencies)")
    for role, cpu in results.cpu.items():
        print(f"CPU {role:<8} {cpu:6.1f} s = {cpu / n * 1e3:5.2f} ms per request "
              f"({cpu / took:.2f} cores)")
    load1, _, _ = os.getloadavg()
    print(f"load average (1 min) at the end: {load1:.2f} on {os.cpu_count()} CPUs\n")
    print(f"{'operation':<26}{'n':>7}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'mean ms':>9}  errors")
    ok = True
    names = {"create": "POST /v1/exports", "status": "GET /v1/exports/{id}"}
    for op in ("create", "status"):
        lat = results.latency.get(op, [])
        if not lat:
            continue
        p99 = pct(lat, 99) * 1e3
        ok = ok and p99 < TARGET_P99_MS and not results.errors.get(op)
        print(f"{names[op]:<26}{len(lat):>7}{pct(lat, 50) * 1e3:>9.2f}{pct(lat, 90) * 1e3:>9.2f}"
              f"{p99:>9.2f}{max(lat) * 1e3:>9.2f}{statistics.fmean(lat) * 1e3:>9.2f}  "
              f"{results.errors.get(op) or '-'}")
    print(f"\ntarget p99 < {TARGET_P99_MS:.0f} ms and no errors: {'met' if ok else 'NOT met'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--create-share", type=float, default=0.25,
                        help="share of requests that create an export (the rest: status)")
    parser.add_argument("--workers", type=int, default=2,
                        help="separate 'egress worker' processes (0: exports stay queued)")
    parser.add_argument("--embedded", action="store_true",
                        help="the API process runs the exports (its embedded worker); "
                             "no separate workers")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the embedded SQLite store, or a throwaway local PostgreSQL "
                             "server (the tests' settings: fsync off)")
    parser.add_argument("--api-threads", type=int, metavar="N",
                        help="api.threads: blocking work run at once per API process")
    parser.add_argument("--api-processes", type=int, default=1, metavar="N",
                        help="egress serve --processes N: API processes sharing the port")
    parser.add_argument("--worker-nice", type=int, default=0, metavar="N",
                        help="run the worker processes at this nice level (e.g. 19: they "
                             "get only the CPU the API and PostgreSQL leave, as workers on "
                             "other machines would)")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw",
                        help="load generator: a minimal asyncio HTTP/1.1 client, or httpx")
    parser.add_argument("--keep", action="store_true", help="keep the home and the logs")
    parser.add_argument("--trace", type=Path, metavar="DIR",
                        help="write every measured request (due time, op, latency) to "
                             "DIR/requests.csv, with --store postgresql also samples of "
                             "pg_stat_activity every 10 ms (DIR/waits.csv) and the server's "
                             "log (DIR/postgresql.log); CPU used by role and by the machine "
                             "every 10 ms (DIR/cpu.csv)")
    parser.add_argument("--pg-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a PostgreSQL server setting (repeatable), e.g. "
                             "log_min_duration_statement=20 or "
                             "shared_preload_libraries=pg_stat_statements")
    args = parser.parse_args()
    workers = 0 if args.embedded else args.workers
    # SIGTERM unwinds like Ctrl-C, so the processes are stopped and the home removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    root = Path(tempfile.mkdtemp(prefix="egress-api-bench-"))
    stack = contextlib.ExitStack()
    store_url = None
    if args.store == "postgresql":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from pgserver import running_server  # the tests' throwaway server

        pg = stack.enter_context(running_server(
            dict(item.split("=", 1) for item in args.pg_setting)))
        store_url = pg.create_database("bench")
        statements = "pg_stat_statements" in " ".join(args.pg_setting)
        if statements:
            import psycopg

            with psycopg.connect(store_url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_stat_statements")
    home = make_home(root, store_url, args.api_threads)
    token = create_token(home)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = root / "egress.log"
    server = start_server(home, port, log, args.embedded, args.api_processes)
    procs = [server]
    try:
        wait_ready(base, server)
        procs += start_workers(home, workers, log, args.worker_nice)
        pids = {"api": [server.pid], "workers": [p.pid for p in procs[1:]]}
        if store_url:
            pids["postgres"] = [postmaster(pg.datadir)]
        if not workers:
            del pids["workers"]
        sessions_before = pg_sessions(store_url) if store_url else 0
        sampler = WaitSampler(store_url) if store_url and args.trace else None
        cpu = CpuSampler(pids) if args.trace else None
        with sampler or contextlib.nullcontext(), cpu or contextlib.nullcontext():
            results, measured_from = asyncio.run(run_load(
                base, token, args.rate, args.seconds, args.create_share, args.warmup,
                args.client, pids))
        if args.trace:
            write_trace(args.trace, results, measured_from, sampler, cpu)
            if store_url and statements:
                write_statements(args.trace / "statements.txt", store_url)
        workers_text = ("embedded worker" if args.embedded else
                        f"{workers} 'egress worker' processes" if workers else "no worker")
        if workers and args.worker_nice:
            workers_text += f" at nice {args.worker_nice}"
        serve = "egress serve" + ("" if args.embedded else " --no-worker")
        setup = (f"{args.api_processes} API process(es) ('{serve}'), "
                 f"{workers_text}, {args.store} store, {args.client} client; "
                 f"{args.create_share:.0%} create")
        ok = report(results, measured_from, args.rate, args.seconds, setup)
        if store_url:
            time.sleep(1.0)  # backends flush their statistics within a second
            # connections the store opened (a pool too small for a burst opens and closes
            # them: a server process, authentication and prepared statements each time)
            print(f"PostgreSQL sessions opened during the run: "
                  f"{pg_sessions(store_url) - sessions_before - 1}")
    finally:
        stop(procs)
        if args.trace and store_url:
            import shutil

            args.trace.mkdir(parents=True, exist_ok=True)
            shutil.copy(pg.datadir / "log", args.trace / "postgresql.log")
        stack.close()
        if args.keep:
            print(f"home and logs kept in {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


def pg_sessions(store_url: str) -> int:
    """Sessions ever opened on the store's database (``pg_stat_database.sessions``)."""
    import psycopg

    with psycopg.connect(store_url.replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute("SELECT sessions FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)

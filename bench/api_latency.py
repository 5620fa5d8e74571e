"""HTTP API latency at a fixed request rate: create and status on loopback.

    .venv/bin/python bench/api_latency.py                       # 200 req/s for 20 s
    .venv/bin/python bench/api_latency.py --rate 400 --seconds 10 --create-share 0.5

Starts ``egress serve`` (the API with its embedded worker and the embedded defaults: a
SQLite store and local files in a fresh home) on 127.0.0.1, creates a token with
``egress tokens create``, then sends requests at a fixed rate from one asyncio httpx
client: ``POST /v1/exports`` (a 200-row table; the embedded worker runs every export
meanwhile) and ``GET /v1/exports/{id}`` of an export created earlier.

The load is an open loop: request *i* is due at ``start + i / rate`` whether or not
earlier ones have answered, and its latency counts from that moment, so a server that
falls behind shows in the figures instead of slowing the load (no coordinated
omission). Prints p50/p90/p99/max per operation, the rate achieved and any errors.
Target: p99 < 50 ms. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

TARGET_P99_MS = 50.0


@dataclass
class Results:
    #: operation → latencies in seconds (from when the request was due to its answer)
    latency: dict[str, list[float]] = field(default_factory=dict)
    #: operation → {status code or exception name: count} for unexpected answers
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    #: how late the client sent each request (its own lag, included in latency)
    lag: list[float] = field(default_factory=list)
    finished_at: float = 0.0
    #: CPU seconds the server used while measured (None: unknown)
    server_cpu: float | None = None

    def record(self, op: str, seconds: float, problem: str | None) -> None:
        self.latency.setdefault(op, []).append(seconds)
        if problem is not None:
            counts = self.errors.setdefault(op, {})
            counts[problem] = counts.get(problem, 0) + 1


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, every thread) of a process so far; None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_home(root: Path) -> Path:
    """A fresh home: a 200-row SQLite source named ``main``, everything else default."""
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
        f'[sources.main]\nurl = "sqlite:///{src}"\n\n'
        # The bench measures latency, not the limits: lift the per-token rate limit and
        # the per-project cap on running exports far above what it sends.
        "[api]\nrate_limit_per_second = 100000.0\nrate_limit_burst = 100000\n"
        "max_active_exports = 1000000\n"
    )
    return home


def cli(home: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
    done = subprocess.run([sys.executable, "-m", "egress.cli", *args, "--home", str(home)],
                          env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"egress {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def create_token(home: Path) -> str:
    out = cli(home, "tokens", "create", "--project", "bench",
              "--scopes", "exports:read,exports:create", "--json")
    return str(json.loads(out)["token"])


def start_server(home: Path, port: int, log: Path, worker: bool) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGRESS_")}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "egress.cli", "serve", "--home", str(home),
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING",
             *([] if worker else ["--no-worker"])],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )


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


BODY = {"source": "main", "tables": ["items"], "format": "csv"}


async def create(client: httpx.AsyncClient, ids: list[str]) -> str | None:
    r = await client.post("/v1/exports", json=BODY)
    if r.status_code != 202:
        return str(r.status_code)
    ids.append(r.json()["id"])
    return None


async def status(client: httpx.AsyncClient, ids: list[str], rng: random.Random) -> str | None:
    # A recent export: the ones a client would be watching.
    r = await client.get(f"/v1/exports/{rng.choice(ids[-200:])}")
    return None if r.status_code == 200 else str(r.status_code)


async def load(base: str, token: str, rate: float, seconds: float, create_share: float,
               warmup: float, server_pid: int) -> tuple[Results, float]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    headers = {"Authorization": f"Bearer {token}"}
    results, rng, ids = Results(), random.Random(7), []
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits,
                                 timeout=30) as client:
        for _ in range(10):  # something to ask the status of, and warm connections
            if await create(client, ids):
                raise SystemExit("POST /v1/exports failed before the load started")

        async def one(op: str, due: float, record: bool) -> None:
            problem = None
            try:
                if op == "create":
                    problem = await create(client, ids)
                else:
                    problem = await status(client, ids, rng)
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            if record:
                took = time.perf_counter() - due
                results.record(op, took, problem)
                results.finished_at = max(results.finished_at, time.perf_counter())

        tasks: list[asyncio.Task[None]] = []
        total = int((warmup + seconds) * rate)
        start = time.perf_counter() + 0.05
        measured_from = start + warmup
        cpu_start = None
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            record = due >= measured_from
            if record:
                if cpu_start is None:
                    cpu_start = cpu_seconds(server_pid)
                results.lag.append(max(0.0, time.perf_counter() - due))
            op = "create" if rng.random() < create_share else "status"
            tasks.append(asyncio.create_task(one(op, due, record)))
        await asyncio.gather(*tasks)
        cpu_end = cpu_seconds(server_pid)
        if cpu_start is not None and cpu_end is not None:
            results.server_cpu = cpu_end - cpu_start
    return results, measured_from


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def report(results: Results, measured_from: float, rate: float, seconds: float) -> bool:
    n = sum(len(v) for v in results.latency.values())
    took = results.finished_at - measured_from
    print(f"\nasked {rate:.0f} req/s for {seconds:.0f} s; answered {n} requests in "
          f"{took:.1f} s = {n / took:.1f} req/s achieved")
    print(f"client lag: p50 {pct(results.lag, 50) * 1e3:.2f} ms, "
          f"p99 {pct(results.lag, 99) * 1e3:.2f} ms (included in the latencies)")
    if results.server_cpu is not None:
        print(f"server CPU: {results.server_cpu:.1f} s = {results.server_cpu / n * 1e3:.2f} ms "
              f"per request ({results.server_cpu / took:.2f} cores; embedded worker included)")
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
    parser.add_argument("--no-worker", action="store_true",
                        help="serve the API only (exports stay queued): the API's own cost")
    parser.add_argument("--keep", action="store_true", help="keep the home and server log")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the server is stopped and the home removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    root = Path(tempfile.mkdtemp(prefix="egress-api-bench-"))
    home = make_home(root)
    token = create_token(home)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = root / "serve.log"
    proc = start_server(home, port, log, worker=not args.no_worker)
    try:
        wait_ready(base, proc)
        results, measured_from = asyncio.run(
            load(base, token, args.rate, args.seconds, args.create_share, args.warmup,
                 proc.pid))
        ok = report(results, measured_from, args.rate, args.seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if args.keep:
            print(f"home and server log kept in {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)

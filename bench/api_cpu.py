"""CPU per API request, in one process, one request at a time (no queueing, no network).

    .venv/bin/python bench/api_cpu.py                      # create, status, manager.create_export
    .venv/bin/python bench/api_cpu.py --requests 2000 --profile create   # cProfile, top 40
    .venv/bin/python bench/api_cpu.py --store postgresql    # + the statements per request

The app (``egress.web.create_site``) is driven through httpx's ASGI transport on a fresh
home with the embedded SQLite store and ``bench/api_latency.py``'s 200-row table; the
figures include the in-process client's own CPU (about 0.5 ms a request). Also measures
``manager.create_export`` alone (the catalog check and the store's insert transaction),
the part of a create that does not depend on the HTTP layer. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import api_latency  # the bench's home and token helpers

from egress import manager
from egress.config import load_settings
from egress.store.sql import SqlJobStore
from egress.web import create_site


async def per_request(home: Path, token: str, op: str, n: int,
                      profile: bool) -> tuple[float, float]:
    settings = load_settings(home, env={})
    app = create_site(settings)
    headers = {"Authorization": f"Bearer {token}"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            created = await client.post("/v1/exports", json=api_latency.BODY, headers=headers)
            export_id = created.json()["id"]
            for _ in range(50):  # warm caches and the pool
                await client.get(f"/v1/exports/{export_id}", headers=headers)
            profiler = cProfile.Profile()
            started = time.process_time()
            wall = time.perf_counter()
            if profile:
                profiler.enable()
            for _ in range(n):
                if op == "status":
                    r = await client.get(f"/v1/exports/{export_id}", headers=headers)
                else:
                    r = await client.post("/v1/exports", json=api_latency.BODY, headers=headers)
                assert r.status_code in (200, 202), r.text
            profiler.disable()
            spent = time.process_time() - started
            wall = time.perf_counter() - wall
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    return spent / n, wall / n


def create_export_alone(home: Path, n: int) -> float:
    settings = load_settings(home, env={})
    store = SqlJobStore(settings.store_url)
    store.migrate()
    try:
        request = manager.ExportRequest(source="main", tables=("items",), format="csv")
        for _ in range(30):
            manager.create_export(store, settings, request, project="bench")
        started = time.process_time()
        for _ in range(n):
            manager.create_export(store, settings, request, project="bench",
                                  active_cap=1_000_000)
        return (time.process_time() - started) / n
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--profile", choices=("create", "status"),
                        help="cProfile this operation (the event loop's thread only)")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the embedded SQLite store, or a throwaway local PostgreSQL "
                             "server (then the statements each operation ran are listed)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        store_url = None
        if args.store == "postgresql":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from pgserver import running_server  # the tests' throwaway server

            pg = stack.enter_context(running_server(
                {"shared_preload_libraries": "pg_stat_statements"}))
            store_url = pg.create_database("bench")
        return run(args, store_url)


def run(args: argparse.Namespace, store_url: str | None) -> int:
    # a fresh home each: a create's cap count reads the project's queued exports
    ops = [args.profile] if args.profile else ["status", "create", "manager.create_export"]
    for op in ops:
        if store_url:
            reset_statements(store_url)
        home = api_latency.make_home(Path(tempfile.mkdtemp(prefix="egress-api-cpu-")),
                                     store_url)
        home.chmod(0o700)
        if op == "manager.create_export":
            cpu = create_export_alone(home, args.requests)
            print(f"{op:<21} {cpu * 1000:6.2f} ms CPU (catalog check + store transaction)")
            if store_url:
                print_statements(store_url, args.requests)
            continue
        token = api_latency.create_token(home)
        cpu, wall = asyncio.run(per_request(home, token, op, args.requests,
                                            op == args.profile))
        print(f"{op:<21} {cpu * 1000:6.2f} ms CPU, {wall * 1000:6.2f} ms wall per request "
              "(app + in-process client)")
        if store_url:
            print_statements(store_url, args.requests)
    return 0


def reset_statements(store_url: str) -> None:
    import psycopg

    with psycopg.connect(store_url.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def print_statements(store_url: str, n: int) -> None:
    """The statements run since the reset (warm-up included), per measured request."""
    import psycopg

    with psycopg.connect(store_url.replace("postgresql+psycopg", "postgresql")) as conn:
        rows = conn.execute(
            "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) ORDER BY calls DESC").fetchall()
    total = sum(r[0] for r in rows)
    print(f"  {total / n:.1f} statements per request (server exec ms per request):")
    for calls, ms, text in rows:
        if calls >= n / 2:
            print(f"  {calls / n:5.2f} x {ms / calls:6.3f} ms  {text}")


if __name__ == "__main__":
    sys.exit(main())

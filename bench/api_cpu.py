"""CPU per API request, in one process, one request at a time (no queueing, no network).

    .venv/bin/python bench/api_cpu.py                      # create, status, manager.create_export
    .venv/bin/python bench/api_cpu.py --requests 2000 --profile create   # cProfile, top 40

The app (``egress.web.create_site``) is driven through httpx's ASGI transport on a fresh
home with the embedded SQLite store and ``bench/api_latency.py``'s 200-row table; the
figures include the in-process client's own CPU (about 0.5 ms a request). Also measures
``manager.create_export`` alone (the catalog check and the store's insert transaction),
the part of a create that does not depend on the HTTP layer. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def per_request(home: Path, token: str, op: str, n: int, profile: bool) -> float:
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
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    return spent / n


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
    args = parser.parse_args()
    # a fresh home each: a create's cap count reads the project's queued exports
    ops = [args.profile] if args.profile else ["status", "create", "manager.create_export"]
    for op in ops:
        home = api_latency.make_home(Path(tempfile.mkdtemp(prefix="egress-api-cpu-")))
        home.chmod(0o700)
        if op == "manager.create_export":
            cpu = create_export_alone(home, args.requests)
            print(f"{op:<21} {cpu * 1000:6.2f} ms CPU (catalog check + store transaction)")
            continue
        token = api_latency.create_token(home)
        cpu = asyncio.run(per_request(home, token, op, args.requests, op == args.profile))
        print(f"{op:<21} {cpu * 1000:6.2f} ms CPU per request (app + in-process client)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

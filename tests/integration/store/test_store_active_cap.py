"""Conformance: the per-project cap on active exports holds against concurrent creates,
from threads of one process and from separate processes (no interleaving passes it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from egress.exceptions import ActiveLimitError
from egress.store.sql import SqlJobStore

CAP = 5
CALLERS = 12

#: One create per process; every process waits for the go file, so all create at once.
CREATOR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from egress.exceptions import ActiveLimitError
    from egress.store.sql import SqlJobStore
    here = Path(sys.argv[4])
    sys.path[:0] = [str(here), str(here.parent.parent)]
    from conftest import export_request

    store = SqlJobStore(sys.argv[1])
    store.now()  # connected before the start
    go = Path(sys.argv[3])
    (go / f"{sys.argv[5]}.ready").touch()
    while not (go / "start").exists():
        time.sleep(0.005)
    try:
        store.export_create(*export_request("p"), active_cap=int(sys.argv[2]))
        print("created")
    except ActiveLimitError as exc:
        print("limit:", exc)
    store.close()
    """
)


def test_the_cap_refuses_a_create_with_a_clear_error(store: SqlJobStore, export_request):
    for _ in range(2):
        store.export_create(*export_request("p"), active_cap=2)
    with pytest.raises(ActiveLimitError, match=r"project 'p' has 2 exports queued or running"):
        store.export_create(*export_request("p"), active_cap=2)
    # another project has its own count; no cap at all: no limit
    store.export_create(*export_request("q"), active_cap=2)
    store.export_create(*export_request("p"))
    assert store.export_count_active("p") == 3


def test_a_replay_of_an_idempotency_key_is_answered_at_the_cap(store, export_request):
    first, created = store.export_create(*export_request("p", key="k", request_hash="h"),
                                         active_cap=1)
    again, created_again = store.export_create(
        *export_request("p", key="k", request_hash="h"), active_cap=1)
    assert (created, created_again) == (True, False) and again.id == first.id


def test_concurrent_creates_from_threads_stop_at_the_cap(store_url: str, export_request):
    stores = [SqlJobStore(store_url) for _ in range(CALLERS)]
    start = threading.Barrier(CALLERS)
    outcomes: list[str] = []

    def create(s: SqlJobStore) -> None:
        s.now()  # connected before the barrier
        start.wait(timeout=60)
        try:
            s.export_create(*export_request("p"), active_cap=CAP)
            outcomes.append("created")
        except ActiveLimitError:
            outcomes.append("limit")

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(outcomes) == ["created"] * CAP + ["limit"] * (CALLERS - CAP)
        assert stores[0].export_count_active("p") == CAP
    finally:
        for s in stores:
            s.close()


def test_concurrent_creates_from_processes_stop_at_the_cap(store_url: str, tmp_path: Path):
    go = tmp_path / "go"
    go.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, store_url, str(CAP), str(go),
             str(Path(__file__).parent), str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(CALLERS)
    ]
    try:
        deadline = time.monotonic() + 120
        for i, proc in enumerate(procs):  # every process ready, then all go at once
            while not (go / f"{i}.ready").exists():
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "a creator process did not start"
                time.sleep(0.01)
        (go / "start").touch()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outputs.append(out.strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert sorted(o.split(":")[0] for o in outputs) == (
        ["created"] * CAP + ["limit"] * (CALLERS - CAP)), outputs
    store = SqlJobStore(store_url)
    try:
        assert store.export_count_active("p") == CAP
    finally:
        store.close()

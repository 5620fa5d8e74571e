"""A pytest plugin: the CPU seconds of every test, to find what makes the suite slow.

    PYTHONPATH=bench EGRESS_TEST_CPU=/tmp/cpu.json .venv/bin/python -m pytest -p pytest_cpu tests/…
    .venv/bin/python bench/pytest_cpu.py /tmp/cpu.json [more.json …]

Per test (setup, call and teardown): wall seconds, the pytest process's CPU (all its
threads) and the CPU of the child processes that ended meanwhile (workers, CLI runs; a
server started for the whole session counts nowhere). Run as a script it prints the
files and tests that cost the most CPU. Prints figures; not a test.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

_rows: list[tuple[str, float, float, float]] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    wall, (own, children) = time.monotonic(), _cpu()
    yield
    own2, children2 = _cpu()
    _rows.append((item.nodeid, time.monotonic() - wall, own2 - own, children2 - children))


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("EGRESS_TEST_CPU")
    if out:
        with open(out, "w") as f:
            json.dump(_rows, f)


def report(paths: list[str], top: int = 25) -> None:
    rows: list[Any] = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, wall, own, children in rows:
        entry = files[nodeid.split("::")[0]]
        entry[0] += own + children
        entry[1] += wall
        entry[2] += 1
    total = sum(own + children for _, _, own, children in rows)
    print(f"{len(rows)} tests, {total:.0f} CPU s (servers started for the session not counted)")
    print("\nfiles by CPU s:")
    for name, (cpu, wall, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{cpu:7.1f} CPU s {wall:7.1f} wall s {count:4d} tests  {name}")
    print("\ntests by CPU s:")
    for nodeid, wall, own, children in sorted(rows, key=lambda r: -(r[2] + r[3]))[:top]:
        print(f"{own + children:7.1f} CPU s {wall:7.1f} wall s  {nodeid}")


if __name__ == "__main__":
    report(sys.argv[1:])

"""Many projects' exports drained by several worker processes: what the fleet test and
``bench/fleet.py`` check and report, read from the store's lease log and the outputs."""

from __future__ import annotations

import collections
import sqlite3
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from egress.config import Settings
from egress.domain.jobs import ExportRecord, ExportState
from egress.manager import ExportRequest, create_export, export_root
from egress.store.base import JobStore

#: lease events that end a claim (the task stops running on that lease)
ENDS = ("requeue", "release", "finish", "fail", "rescue", "cancel")


def make_rows_source(path: Path, rows: int) -> str:
    """A SQLite source with one table ``t`` of ``rows`` rows."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, n REAL)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                     [(i, f"value {i}", i / 7) for i in range(rows)])
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def create_round_robin(store: JobStore, settings: Settings, projects: int, per_project: int,
                       source: str = "main") -> list[ExportRecord]:
    """``per_project`` exports of each of ``projects`` projects, each project's in one
    block (project 0's all first): a first-come claim would starve the last projects."""
    made = []
    for p in range(projects):
        for _ in range(per_project):
            request = ExportRequest(source=source, tables=("t",), format="csv")
            made.append(create_export(store, settings, request, project=f"p{p:03d}")[0])
    return made


@dataclass
class DrainReport:
    exports: int
    completed: int
    #: tasks claimed then ended more than once with a finish (run twice)
    finished_twice: list[str]
    #: most tasks of one project running at once, seen in the lease log
    most_running: dict[str, int]
    #: seconds from creation to the first claim, by project
    waits: dict[str, list[float]] = field(default_factory=dict)
    #: how many claims (of any project) came before each project's first claim
    first_claim_index: dict[str, int] = field(default_factory=dict)
    #: exports whose output does not hold exactly the source's rows
    wrong_outputs: list[str] = field(default_factory=list)

    def wait_table(self) -> list[tuple[str, float, float, float]]:
        """(project, mean, p50, max) of the waits, by project."""
        return [(p, statistics.fmean(w), statistics.median(w), max(w))
                for p, w in sorted(self.waits.items())]

    def spread(self) -> float:
        """Largest mean wait of a project over the smallest (1.0: perfectly even)."""
        means = [statistics.fmean(w) for w in self.waits.values()]
        return max(means) / max(min(means), 1e-9)


def drain_report(store: JobStore, settings: Settings, exports: list[ExportRecord],
                 rows: int) -> DrainReport:
    by_id = {e.id: e for e in exports}
    finals = {i: store.export_get(None, i) for i in by_id}
    completed = sum(1 for e in finals.values() if e and e.state is ExportState.COMPLETED)
    events = [e for e in store.lease_events() if e.export_id in by_id]
    finishes = collections.Counter(e.task_id for e in events if e.kind == "finish")
    running: dict[str, set[str]] = collections.defaultdict(set)
    most: dict[str, int] = collections.defaultdict(int)
    first_claim: dict[str, float] = {}
    first_index: dict[str, int] = {}
    claims = 0
    for e in events:  # in id order: never more concurrency than the claims counted
        project = by_id[e.export_id].project
        if e.kind == "claim":
            running[project].add(e.task_id)
            most[project] = max(most[project], len(running[project]))
            if e.export_id not in first_claim:
                first_claim[e.export_id] = e.at
            first_index.setdefault(project, claims)
            claims += 1
        elif e.kind in ENDS:
            running[project].discard(e.task_id)
    waits: dict[str, list[float]] = collections.defaultdict(list)
    for export_id, at in first_claim.items():
        waits[by_id[export_id].project].append(at - by_id[export_id].created_at)
    wrong = []
    for export_id, final in finals.items():
        if final is None or final.state is not ExportState.COMPLETED:
            continue
        files = [p for p in export_root(settings, final).rglob("*.csv")]
        lines = sum(len(p.read_bytes().splitlines()) - 1 for p in files)  # minus headers
        if lines != rows:
            wrong.append(export_id)
    return DrainReport(
        exports=len(exports), completed=completed,
        finished_twice=sorted(t for t, n in finishes.items() if n > 1),
        most_running=dict(most), waits=dict(waits),
        first_claim_index=first_index, wrong_outputs=wrong)

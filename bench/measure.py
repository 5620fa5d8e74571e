"""Wall time and peak RSS of one command in a fresh process.

The peak RSS is the ``ru_maxrss`` that ``wait4`` reports for that very child (Linux:
KiB; the largest resident set of the process and of the children it waited for), so
measurements run one after another in the same benchmark do not mix.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_mb: float
    #: user + system CPU seconds of the process (and of the children it waited for)
    cpu_seconds: float = 0.0
    #: None when the command succeeded, else the end of what it wrote to stderr.
    error: str | None = None


def compile_egress() -> None:
    """Byte-compile egress's modules, as installing a package does (pip compiles them).
    With an editable install and ``PYTHONDONTWRITEBYTECODE`` set (as on the benchmark
    machine), every export's process compiled them again: ~70 ms of start-up that an
    installed egress does not spend. The tree is the one the children import (it
    follows ``PYTHONPATH``)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("egress")
    if spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def measure(
    cmd: list[str],
    *,
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
) -> Measured:
    """Run ``cmd`` (its stdout into ``stdout`` or discarded) and measure it."""
    with tempfile.TemporaryFile() as err, open(stdout or os.devnull, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        error = None
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-5:]
            error = f"exit {proc.returncode}: " + " | ".join(tail)
    cpu = usage.ru_utime + usage.ru_stime
    return Measured(seconds, usage.ru_maxrss / 1024, cpu, error)


def best(runs: list[Measured]) -> Measured:
    """The shortest wall and CPU times of the successful runs with their largest peak RSS
    (on a shared machine the minimum is the figure least disturbed by others), or the
    first failure."""
    ok = [r for r in runs if r.error is None]
    if not ok:
        return runs[0]
    return Measured(min(r.seconds for r in ok), max(r.peak_rss_mb for r in ok),
                    min(r.cpu_seconds for r in ok))


def output_size(path: Path) -> tuple[int, int]:
    """Bytes and number of the data files under ``path`` (a file, or an export
    directory without its state, manifest and marker)."""
    if path.is_file():
        return path.stat().st_size, 1
    total = files = 0
    for p in path.rglob("*"):
        if p.is_file() and ".egress" not in p.parts and p.name not in ("manifest.json",
                                                                         "_SUCCESS"):
            total += p.stat().st_size
            files += 1
    return total, files


def steadiness(timings_file: Path) -> tuple[float, float] | None:
    """Median seconds per row of the parts in the last 10 % of the rows divided by the
    same over the first 10 %, in wall time and in this process's CPU time, from the
    committed parts; None with too few parts to tell. Medians, so that a burst of load
    from other processes during one part does not decide it; CPU time, because a shared
    machine's load lengthens wall time but hardly CPU time. A short last part (its fixed
    costs spread over few rows) is left out."""
    data = json.loads(timings_file.read_text())
    started, commits = data["started"], data["commits"]
    if started is None or len(commits) < 4:
        return None
    total = commits[-1][1]
    parts = []  # (first row, rows, wall seconds, CPU seconds) per committed part
    (before_t, before_cpu), before_rows = started, 0
    for t, rows, _, cpu in commits:
        parts.append((before_rows, rows - before_rows, t - before_t, cpu - before_cpu))
        before_t, before_cpu, before_rows = t, cpu, rows
    typical = statistics.median(p[1] for p in parts)
    if len(parts) > 4 and parts[-1][1] < typical / 2:
        parts.pop()
    first = [p for p in parts if p[0] < total * 0.1] or parts[:1]
    last = [p for p in parts if p[0] + p[1] > total * 0.9] or parts[-1:]

    def ratio(i: int) -> float:
        early = statistics.median(p[i] / p[1] for p in first)
        late = statistics.median(p[i] / p[1] for p in last)
        return late / early if early > 0 else float("inf")

    return ratio(2), ratio(3)

"""The benchmark's figures as markdown, and their place in docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from measure import Measured

#: Peak RSS targets: the largest run within this factor of the smallest, and under MB.
RSS_GROWTH = 1.2
RSS_LIMIT_MB = 200.0
#: Seconds per row over the last 10 % within this factor of the first 10 %.
STEADY = 1.2
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Result:
    source: str
    rows: int
    case: str
    egress: Measured
    egress_bytes: int
    #: last-10 % over first-10 % seconds per row, wall and CPU (None: too few parts)
    steadiness: tuple[float, float] | None
    tool: str | None
    tool_run: Measured | None
    tool_bytes: int | None
    #: the largest egress/tool ratio the issue allows (None: figures only)
    target: float | None
    #: data files written (None: not counted, in results saved before files were)
    egress_files: int | None = None
    tool_files: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """A result as ``dataclasses.asdict`` wrote it."""
        def run(value: dict[str, Any] | None) -> Measured | None:
            return None if value is None else Measured(**value)

        steady = data["steadiness"]
        egress = run(data["egress"])
        assert egress is not None
        return cls(**{**data, "egress": egress, "tool_run": run(data["tool_run"]),
                      "steadiness": None if steady is None else tuple(steady)})

    @property
    def ratio(self) -> float | None:
        if self.tool_run is None or self.tool_run.error or self.egress.error:
            return None
        return self.egress.seconds / self.tool_run.seconds

    @property
    def cpu_ratio(self) -> float | None:
        """CPU against CPU: fair where the tool does its work in its own process (not
        psql/pg_dump, whose server formats the rows)."""
        if self.ratio is None or self.tool_run is None or self.tool_run.cpu_seconds <= 0:
            return None
        return self.egress.cpu_seconds / self.tool_run.cpu_seconds


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")


def _mark(ok: bool | None) -> str:
    return "" if ok is None else (" ✓" if ok else " ✗")


def _count(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def _mb(n: int | None) -> str:
    return "–" if n is None else f"{n / 1e6:,.0f}"


def _secs(m: Measured | None) -> str:
    if m is None:
        return "–"
    return "failed" if m.error else f"{m.seconds:.2f}"


def _rss(m: Measured | None) -> str:
    return "–" if m is None or m.error else f"{m.peak_rss_mb:.0f}"


def summary(r: Result) -> str:
    """One line of progress for ``r``."""
    def one(name: str, m: Measured | None) -> str:
        if m is None:
            return ""
        if m.error:
            return f"{name} failed ({m.error})"
        return f"{name} {m.seconds:.2f} s ({m.cpu_seconds:.2f} s CPU, {m.peak_rss_mb:.0f} MB)"

    ratio = "" if r.ratio is None else f" = {r.ratio:.2f}×"
    tool = one(r.tool or "", r.tool_run)
    return one("egress", r.egress) + (f" vs {tool}{ratio}" if tool else "")


def _cpu(m: Measured | None) -> str:
    return "–" if m is None or m.error else f"{m.cpu_seconds:.2f}"


def results_table(results: list[Result]) -> str:
    lines = [
        "| source | rows | format | egress s | egress CPU s | egress RSS MB | out MB | files "
        "| last/first 10 % wall / CPU | tool | tool s | tool CPU s | tool RSS MB | tool out MB "
        "| tool files | egress/tool | CPU egress/tool | target |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = r.ratio
        steady = "–" if r.steadiness is None else " / ".join(
            f"{x:.2f}{_mark(x <= STEADY)}" for x in r.steadiness)
        ok = None if ratio is None or r.target is None else ratio <= r.target
        lines.append(
            f"| {r.source} | {r.rows:,} | {r.case} | {_secs(r.egress)} | {_cpu(r.egress)} "
            f"| {_rss(r.egress)} | {_mb(r.egress_bytes)} | {_count(r.egress_files)} | {steady} "
            f"| {_cell(r.tool or '–')} "
            f"| {_secs(r.tool_run)} | {_cpu(r.tool_run)} | {_rss(r.tool_run)} "
            f"| {_mb(r.tool_bytes)} | {_count(r.tool_files)} "
            f"| {'–' if ratio is None else f'{ratio:.2f}×'}{_mark(ok)} "
            f"| {'–' if r.cpu_ratio is None else f'{r.cpu_ratio:.2f}×'} "
            f"| {'–' if r.target is None else f'≤ {r.target}×'} |"
        )
    return "\n".join(lines)


def rss_table(results: list[Result]) -> str | None:
    """Peak RSS of the largest run against the smallest, per source and format."""
    sizes = sorted({r.rows for r in results})
    if len(sizes) < 2:
        return None
    small, large = sizes[0], sizes[-1]
    by_key = {(r.source, r.case, r.rows): r for r in results if not r.egress.error}
    lines = [
        f"| source | format | RSS MB at {small:,} | RSS MB at {large:,} | growth "
        f"(≤ {RSS_GROWTH}×) | under {RSS_LIMIT_MB:.0f} MB |",
        "|---|---|---:|---:|---:|---|",
    ]
    for source, case in dict.fromkeys((r.source, r.case) for r in results):
        a, b = by_key.get((source, case, small)), by_key.get((source, case, large))
        if a is None or b is None:
            continue
        growth = b.egress.peak_rss_mb / a.egress.peak_rss_mb
        lines.append(
            f"| {source} | {case} | {a.egress.peak_rss_mb:.0f} | {b.egress.peak_rss_mb:.0f} "
            f"| {growth:.2f}×{_mark(growth <= RSS_GROWTH)} "
            f"| {'yes' if b.egress.peak_rss_mb < RSS_LIMIT_MB else 'no'} |"
        )
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return found.group(1).strip() if found else "unknown CPU"


def _memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=Path(__file__).parent)
    return done.stdout.strip() or "unknown"


def machine(versions: dict[str, str], load: tuple[float, float, float]) -> str:
    """The machine, the versions, and the load average at the start, the end and its
    highest after a measurement (other work on a shared machine)."""
    import adbc_driver_sqlite
    import pyarrow

    parts = [
        f"{os.cpu_count()} cores ({_cpu_model()}), {_memory_gib():.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"Python {platform.python_version()}, pyarrow {pyarrow.__version__}, "
        f"ADBC {adbc_driver_sqlite.__version__}, egress at commit {_commit()}",
        ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"load average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end, "
        f"up to {load[2]:.1f} in between",
    ]
    return "\n".join(f"- {p}" for p in parts)


def block(command: str, results: list[Result], machine_text: str, baseline: Measured) -> str:
    out = [
        f"Measured with `{command}` (wall time of a fresh process each, "
        "best of the repeats; peak RSS from `wait4`).",
        "",
        machine_text,
        f"- a process that only starts Python and imports egress: {baseline.seconds:.2f} s, "
        f"{baseline.peak_rss_mb:.0f} MB (included in every egress figure)",
        "",
        results_table(results),
    ]
    rss = rss_table(results)
    if rss:
        out += ["", "Peak RSS against table size:", "", rss]
    return "\n".join(out)


def write_docs(path: Path, text: str) -> None:
    """Put ``text`` between the markers of ``path`` (made with a title if missing)."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n\n"
    section = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + section + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)

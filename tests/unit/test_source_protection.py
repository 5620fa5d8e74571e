"""Source protection of one reader (sources/protection.py): pause, rows/s ceiling, and
the limits as settings (config.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from egress.config import load_settings
from egress.domain.limits import SourceLimits
from egress.exceptions import ConfigError
from egress.sources import open_source
from egress.sources.protection import ThrottledSource, protect


class FakeClock:
    """Time that moves only when the reader sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(1, 3001)])
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


def _pages(source, page: int) -> list[list[int]]:
    info = source.describe("t")
    pages, after = [], None
    while True:
        ids = [i for b in source.read(info, after, page) for i in b.column("id").to_pylist()]
        if not ids:
            return pages
        pages.append(ids)
        after = (ids[-1],)


def test_a_pause_between_pages_and_the_same_rows(sqlite_url: str) -> None:
    plain = open_source(sqlite_url)
    clock = FakeClock()
    throttled = ThrottledSource(open_source(sqlite_url), SourceLimits(page_pause_seconds=2.0),
                                clock=clock.clock, sleep=clock.sleep)
    try:
        assert _pages(throttled, 1000) == _pages(plain, 1000)
    finally:
        plain.close()
        throttled.close()
    # four reads (three pages and the empty one after them), a pause before each but the first
    assert clock.sleeps == [2.0, 2.0, 2.0]


def test_the_rows_per_second_ceiling_holds_on_average(sqlite_url: str) -> None:
    clock = FakeClock()
    throttled = ThrottledSource(open_source(sqlite_url),
                                SourceLimits(max_rows_per_second=500.0),
                                clock=clock.clock, sleep=clock.sleep)
    start = clock.now
    try:
        rows = sum(len(p) for p in _pages(throttled, 1000))
    finally:
        throttled.close()
    assert rows == 3000
    assert clock.now - start == pytest.approx(3000 / 500, abs=1e-6)  # 6 s of waits
    assert max(clock.sleeps) <= 5.0  # in steps


def test_the_wrapper_keeps_the_sources_own_attributes(sqlite_url: str) -> None:
    source = open_source(sqlite_url)
    wrapped = protect(source, SourceLimits(page_pause_seconds=0.5))
    assert isinstance(wrapped, ThrottledSource)
    assert wrapped.dialect == "sqlite" and wrapped.tables() == ["t"]
    assert protect(source, SourceLimits()) is source  # nothing to do: the source itself
    wrapped.close()


def test_limits_from_the_file_and_the_environment(tmp_path: Path) -> None:
    (tmp_path / "egress.toml").write_text(
        '[sources.app_db]\nurl = "postgresql://r@db/app"\nmax_tasks = 2\n'
        "statement_timeout_seconds = 30\n"
        '[sources.files]\nurl = "sqlite:///x.db"\n')
    settings = load_settings(tmp_path, env={"EGRESS_SOURCE_APP_DB_PAGE_PAUSE_SECONDS": "0.5",
                                            "EGRESS_SOURCE_FILES_MAX_ROWS_PER_SECOND": "1e5"})
    assert settings.source_limits == {
        "app_db": SourceLimits(max_tasks=2, statement_timeout_seconds=30.0,
                               page_pause_seconds=0.5),
        "files": SourceLimits(max_rows_per_second=100000.0)}
    assert settings.source_task_limits() == {"app_db": 2}
    assert settings.limits_of("postgresql://r@db/app") == SourceLimits()  # a URL: none


@pytest.mark.parametrize(("extra", "message"), [
    ("max_taks = 2", "unknown setting sources.main.max_taks; allowed: "),
    ("max_tasks = -1", "sources.main.max_tasks: -1; it must be >= 0"),
    ("page_pause_seconds = 120", "page_pause_seconds: 120; allowed: 0 to 60"),
    ("statement_timeout_seconds = 5",
     "statement_timeout_seconds is not supported for sqlite sources; supported: PostgreSQL"),
    ("max_tasks = 'two'", "bad value for sources.main.max_tasks: 'two'"),
])
def test_bad_limits_are_refused_by_name(tmp_path: Path, extra: str, message: str) -> None:
    (tmp_path / "egress.toml").write_text(f'[sources.main]\nurl = "sqlite:///x.db"\n{extra}\n')
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(tmp_path, env={})


def test_limits_without_a_url_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="source\\(s\\) ghost have settings but no url"):
        load_settings(tmp_path, env={"EGRESS_SOURCE_GHOST_MAX_TASKS": "2"})

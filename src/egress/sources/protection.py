"""Source protection for table reads: a statement timeout per page, a pause between
pages and a rows-per-second ceiling (``[sources.NAME]`` in egress.toml: SourceLimits).

The fleet-wide limit of running tasks per source is the claim's (store/claim.py); what
is here applies to one reader. The pause and the ceiling wrap any source
(``ThrottledSource``): every page is one ``read()`` call, so waiting before a page's
query starts and between the batches it yields paces the database the same way for
every read-ahead design; everything else (describe, the source's own capabilities) is
the wrapped source's. The statement timeout needs the source's support
(``set_statement_timeout``: PostgreSQL).

The waits are on a clock the tests can replace; the ceiling is an average over the
reader's life (a token bucket without burst): after a slow stretch it does not race.
A wait runs in the reading thread between two batches: a slice that has to stop (its
deadline, a SIGTERM) waits at most for one batch's share of the ceiling or one pause.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.limits import SourceLimits
from egress.domain.predicate import Predicate
from egress.sources.base import Source, TableInfo

#: Longest single sleep (s); a wait is made of such steps.
MAX_WAIT = 5.0


class ThrottledSource:
    """``source`` read at most ``max_rows_per_second`` rows per second, with
    ``page_pause_seconds`` between the end of one page and the query of the next."""

    def __init__(
        self, source: Source, limits: SourceLimits, *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._source, self._limits = source, limits
        self.dialect = source.dialect
        self._clock, self._sleep = clock, sleep
        self._started: float | None = None
        self._rows = 0
        self._page_ended: float | None = None
        #: seconds waited so far (for the tests and the logs)
        self.waited = 0.0

    def __getattr__(self, name: str) -> Any:
        # the wrapped source's own attributes and capabilities (inline_cursor, role …)
        return getattr(self._source, name)

    def tables(self) -> list[str]:
        return self._source.tables()

    def describe(self, table: str) -> TableInfo:
        return self._source.describe(table)

    def close(self) -> None:
        self._source.close()

    def _wait(self, seconds: float) -> None:
        while seconds > 0:
            step = min(seconds, MAX_WAIT)
            self._sleep(step)
            self.waited += step
            seconds -= step

    def _pace(self) -> None:
        """Wait until the rows read so far are within the ceiling."""
        rate = self._limits.max_rows_per_second
        if rate <= 0 or self._started is None:
            return
        self._wait(self._started + self._rows / rate - self._clock())

    def read(
        self, table: TableInfo, after: Key | None, limit: int,
        predicate: Predicate | None = None,
    ) -> Iterator[pa.RecordBatch]:
        pause = self._limits.page_pause_seconds
        if pause > 0 and self._page_ended is not None:
            self._wait(self._page_ended + pause - self._clock())
        self._pace()
        if self._started is None:
            self._started = self._clock()
        try:
            for batch in self._source.read(table, after, limit, predicate=predicate):
                yield batch
                self._rows += batch.num_rows
                self._pace()
        finally:
            self._page_ended = self._clock()


def protect(source: Source, limits: SourceLimits) -> Source:
    """``source`` with the limits a reader applies: its statement timeout set, and
    throttled if the limits ask for it."""
    if limits.statement_timeout_seconds > 0:
        setter = getattr(source, "set_statement_timeout", None)
        if setter is None:  # config.py refuses it for the kinds without support
            raise TypeError(f"a {source.dialect} source takes no statement timeout")
        setter(limits.statement_timeout_seconds)
    if limits.throttled:
        return ThrottledSource(source, limits)
    return source

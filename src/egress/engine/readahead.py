"""Read-ahead: pages of a table read on a second thread while the slice encodes.

A slice reads the table one page at a time (``part_rows`` rows after the cursor) and
the next page always starts after the last key of the one before, so it can be read
while the current one is encoded, compressed and stored. Reading (the driver's C code
and Arrow's casts) and encoding (Arrow kernels, hashing, writing) mostly release the
GIL, so on two cores they overlap.

Nothing read ahead is ever committed by itself: the slice consumes pages in order and
commits only what it consumed. A page asked for after another key than the one the
thread is on (the first page of a slice, a resumed cursor) restarts the thread there;
pages read ahead and not used are dropped when the slice ends.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from egress.domain.keys import Key
from egress.domain.predicate import Predicate
from egress.engine.sizes import SizeLimits, check_batch, check_page
from egress.sources.base import Source, TableInfo, forward_only

T = TypeVar("T")

#: Batches the reader may hold ahead of the encoder (about one page of most tables).
QUEUE_BATCHES = 2
_JOIN_SECONDS = 30.0


@contextlib.contextmanager
def closing_iterator(it: Iterator[T]) -> Iterator[Iterator[T]]:
    """``contextlib.closing`` for an iterator that may be a generator: closed (its
    ``finally`` blocks run: a read transaction ends) when the block is left early."""
    try:
        yield it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class _PageEnd:
    #: where the thread's next page starts; None if it stopped (the table ended)
    next_after: Key | None
    more: bool


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class PageReader:
    """Pages of ``table`` in key order; ``pages(after)`` yields one page's batches."""

    def __init__(
        self, source: Source, table: TableInfo, limit: int, predicate: Predicate | None,
        last_key: Callable[[pa.RecordBatch], Key], limits: SizeLimits | None = None,
    ) -> None:
        self._source, self._table, self._limit = source, table, limit
        self._limits = limits or SizeLimits()
        self._predicate, self._last_key = predicate, last_key
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[object] = queue.Queue(QUEUE_BATCHES)
        self._stop = threading.Event()
        #: the key after which the thread's next unconsumed page starts (consumer side)
        self._next: Key | None = None
        #: the thread is on a page and ``_next`` holds: page(_next) can reuse it
        self._aligned = False
        #: A source that reads a stream which cannot go back (a remote engine's result:
        #: a page asked for moves the engine past the one before) is read only on demand,
        #: so that after a slice everything read was committed.
        self._ahead = not forward_only(source)

    def _on_demand(self, after: Key | None) -> Iterator[pa.RecordBatch]:
        page_bytes = 0
        batches = self._source.read(self._table, after, self._limit, predicate=self._predicate)
        with closing_iterator(batches) as it:
            for batch in it:
                self._check(batch)
                page_bytes += batch.nbytes
                check_page(self._table.name, page_bytes, self._limits, after,
                           self._last_key(batch))
                yield batch

    def page(self, after: Key | None) -> Iterator[pa.RecordBatch]:
        """The batches of the ``limit`` rows after ``after`` (all of them only if the
        caller consumes the iterator to its end)."""
        if not self._ahead:
            yield from self._on_demand(after)
            return
        if self._thread is None or not self._aligned or self._next != after:
            self._restart(after)
        self._aligned = False  # until this page is consumed to its end
        while True:
            item = self._queue.get()
            if isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, _PageEnd):
                self._next, self._aligned = item.next_after, item.more
                return
            elif isinstance(item, _Failed):
                self._thread = None
                raise item.error
            else:  # pragma: no cover - the queue holds nothing else
                raise AssertionError(item)

    def close(self) -> None:
        """Stop the thread and drop whatever it read ahead."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)  # unblock a put
        thread.join(_JOIN_SECONDS)

    def __enter__(self) -> PageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the reading thread -----------------------------------------------------------

    def _restart(self, after: Key | None) -> None:
        self.close()
        self._queue = queue.Queue(QUEUE_BATCHES)
        self._stop = threading.Event()
        self._next, self._aligned = after, True
        self._thread = threading.Thread(
            target=self._run, args=(after, self._queue, self._stop),
            name=f"egress-read-{self._table.name}", daemon=True,
        )
        self._thread.start()

    def _put(self, q: queue.Queue[object], stop: threading.Event, item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _check(self, batch: pa.RecordBatch) -> None:
        def key_of(row: int) -> Key:
            return self._last_key(batch.slice(row, 1))

        check_batch(batch, self._table.name, self._limits, key_of)

    def _run(self, after: Key | None, q: queue.Queue[object], stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                rows, last, page_bytes = 0, after, 0
                batches = self._source.read(self._table, after, self._limit,
                                            predicate=self._predicate)
                with closing_iterator(batches) as it:
                    for batch in it:
                        rows += batch.num_rows
                        self._check(batch)
                        last = self._last_key(batch)
                        page_bytes += batch.nbytes
                        check_page(self._table.name, page_bytes, self._limits, after, last)
                        if not self._put(q, stop, batch):
                            return
                # the table ended (or a NULL key the consumer refuses to page past)
                more = rows >= self._limit and None not in (last or ())
                if not self._put(q, stop, _PageEnd(last, more)) or not more:
                    return
                after = last
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(q, stop, _Failed(exc))

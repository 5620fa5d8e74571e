"""One slice of a task: read, encode and commit parts until a deadline (docs/design.md).

A part is the next ``part_rows`` rows in key order (more only to reach the sink's
minimum part size), so part boundaries depend on the data and the plan, never on the
clock. Committing a part is: store it in the sink, then ``commit`` the new checkpoint
(fenced by the caller: a lost lease raises LeaseLostError and nothing more is written).
After the deadline a slice finishes the part in hand; if that would overrun the
deadline by more than ``grace``, it drops the uncommitted part instead — unless the
slice has committed nothing yet, so that every slice makes progress, or the source is
``forward_only`` (a remote engine's result: the rows read cannot be read again, and a
dropped part would start the table over from nothing).

Three threads share the work: the read-ahead reads the next page, the calling thread
encodes a part, and one committer thread stores and commits the part before it
(writing, ``fsync``, an S3 upload, the store's transaction) — in order, one part at a
time, so the commit sequence is exactly that of a single thread. The encoding thread
knows where the next part starts from a dry run of the same commit code (no sink, no
store). A failed commit stops the committer at once: no later part is stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import google_crc32c
import pyarrow as pa

from egress.domain.checkpoint import Checkpoint, FileRecord, OpenFile, PartRecord, TaskSpec
from egress.domain.crc import crc32c_combine
from egress.domain.keys import Key
from egress.engine.copied import CopiedParts
from egress.engine.naming import file_name
from egress.engine.readahead import PageReader, closing_iterator
from egress.engine.resume import verify_open_file
from egress.engine.selection import selected_schema
from egress.engine.sizes import SizeLimits
from egress.exceptions import DataError
from egress.formats import get_compression, make_format
from egress.formats.base import Format, PartBytes
from egress.formats.compression import Compression
from egress.logs import in_context
from egress.sinks.base import Sink
from egress.sources.base import Source, TableInfo, forward_only


def _never() -> bool:
    return False


def _no_commit(cp: Checkpoint) -> None:
    return None


def _no_fence() -> None:
    return None


class _DrySink:
    """Stands for the sink in a dry run of the commit code: stores nothing."""

    def start_file(self, name: str, earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        return {}

    def put_part(
        self, name: str, state: dict[str, Any], number: int, offset: int, data: bytes
    ) -> str | None:
        return None

    def complete_file(
        self, name: str, state: dict[str, Any], size: int, parts: Sequence[PartRecord]
    ) -> str | None:
        return None


_DRY = _DrySink()


@dataclass
class _Part:
    data: PartBytes
    rows: int
    first_key: Key | None
    last_key: Key | None
    exhausted: bool
    #: the encoders' ``meta``, one per chunk that had one (Parquet: its footer)
    metas: tuple[bytes, ...] = ()


@dataclass
class Task:
    """Everything a slice needs besides the checkpoint."""

    spec: TaskSpec
    table: TableInfo
    source: Source
    sink: Sink
    #: Persists a checkpoint; raises LeaseLostError when the caller no longer owns the task.
    commit: Callable[[Checkpoint], None]
    #: Asked before each part: stop after the parts in hand, the one being stored and
    #: the one just encoded (Ctrl-C, SIGTERM, cancel).
    should_stop: Callable[[], bool] = _never
    grace: float = 0.25
    clock: Callable[[], float] = time.monotonic
    #: Called before every write to the sink; raises LeaseLostError when this writer no
    #: longer owns the task (so it writes nothing into the new owner's files).
    fence: Callable[[], None] = _no_fence
    #: what one value and one part's rows may hold (engine/sizes.py)
    limits: SizeLimits = field(default_factory=SizeLimits)
    fmt: Format = field(init=False)
    compression: Compression = field(init=False)

    def __post_init__(self) -> None:
        self.fmt = make_format(self.spec.format, self.spec.format_options)
        outer = "none" if self.fmt.inner_compression else self.spec.compression
        self.compression = get_compression(outer)
        # a column subset is selected from full batches: key columns stay readable
        self._schema = selected_schema(self.table, self.spec.columns)
        self._names = self._schema.names
        self._pages: PageReader | None = None
        #: the source writes the rows (the postgres CSV dialect): parts of its stream
        self._copied: CopiedParts | None = None
        #: rows read can be read again: a part that overruns the deadline may be dropped
        self.rewinds = not forward_only(self.source)

    # --- reading ----------------------------------------------------------------------

    def _raw_last_key(self, batch: pa.RecordBatch) -> Key:
        return tuple(batch.column(k)[-1].as_py() for k in self.table.key_columns)

    def pages(self) -> PageReader:
        """The read-ahead of this slice (closed by ``close_pages`` when it ends)."""
        if self._pages is None:
            self._pages = PageReader(self.source, self.table, self.spec.part_rows,
                                     self.spec.read_predicate, self._raw_last_key, self.limits)
        return self._pages

    def close_pages(self) -> None:
        pages, self._pages = self._pages, None
        if pages is not None:
            pages.close()
        copied, self._copied = self._copied, None
        if copied is not None:
            copied.close()

    def _copied_rows(self, after: Key | None) -> tuple[bytes, int, Key | None, Key | None]:
        """The next part's rows as the source wrote them (the postgres CSV dialect)."""
        if self._copied is None:
            self._copied = CopiedParts(self.source, self.table, list(self._names),
                                       getattr(self.fmt, "delimiter", ","))
        return self._copied.take(after, self.spec.part_rows)

    def _key_at(self, batch: pa.RecordBatch, index: int) -> Key:
        key = tuple(batch.column(k)[index].as_py() for k in self.table.key_columns)
        if None in key:
            # `key > NULL` is never true: paging past this row would skip the rest
            columns = ", ".join(self.table.primary_key or self.table.key_columns)
            raise DataError(
                f"table {self.table.name!r} has a row with NULL in its key ({columns}); "
                "egress reads a table in key order and cannot page past a NULL key "
                "(SQLite allows NULL in a primary key of a rowid table: fix those rows)"
            )
        return key

    def read_part(self, cp: Checkpoint, droppable: bool, deadline: float) -> _Part | None:
        """The next part after the cursor, compressed, or None if dropped for overrunning
        the deadline. A part that opens a file starts with the format's header.

        A part is ``part_rows`` rows, grown by ``part_rows`` more at a time until its
        compressed size reaches ``min_part_bytes`` (the sink's minimum is about the bytes
        it stores). Each such chunk is its own gzip member or zstd frame, so the size is
        known as the part grows and the chunks concatenate into one valid stream.
        """
        spec, fmt = self.spec, self.fmt
        of = cp.open_file
        opens = of is None
        # a stitched range continues the file at its first row (engine/stitch.py)
        rows_before = (spec.stitch_rows_before or 0) + (0 if of is None else of.rows)
        # where the part starts in its file: Parquet's row groups are placed by offset
        # (a format with inner compression: the sizes here are the bytes in the file; a
        # stitched range's piece counts from its own start, moved by the stitch)
        start = 0 if of is None else of.size
        header = fmt.header(self._schema) if opens and not spec.stitch_rows_before else b""
        after, rows = cp.cursor, 0
        first_key: Key | None = None
        last_key: Key | None = None
        chunks: list[PartBytes] = []
        metas: list[bytes] = []
        size = 0
        while True:
            if getattr(fmt, "server_rows", False):
                body, got, first, last = self._copied_rows(after)
                first_key = first_key if first_key is not None else first
                last_key = last if last is not None else last_key
            else:
                offset = start + (size if chunks else len(header))
                encoder = fmt.part_encoder(self._schema, rows_before + rows, offset)
                got = 0
                with closing_iterator(self.pages().page(after)) as it:
                    for batch in it:
                        if first_key is None:
                            first_key = self._key_at(batch, 0)
                        last_key = self._key_at(batch, -1)
                        got += batch.num_rows
                        encoder.add(batch.select(self._names))
                        if droppable and self.clock() > deadline + self.grace:
                            return None
                body = encoder.finish()
                if encoder.meta is not None:
                    metas.append(encoder.meta)
            rows += got
            # (a stitched range after the first continues a file: nothing of its own)
            first_of_file = opens and not chunks and not spec.stitch_rows_before
            if first_of_file:
                body = header + body
            if body or first_of_file:
                # even an empty file is a valid stream (one empty gzip member, zstd frame)
                chunks.append(self.compression.compress(body))
                size += len(chunks[-1])
            exhausted = got < spec.part_rows
            if exhausted or size >= spec.min_part_bytes:
                break
            after = last_key
        if droppable and self.clock() > deadline + self.grace:
            return None  # encoding and compressing took us past the grace: not stored
        # one chunk (most parts): handed on as it is, not copied (see PartBytes)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return _Part(data, rows, first_key, last_key, exhausted, tuple(metas))

    # --- committing -------------------------------------------------------------------

    def commit_part(self, cp: Checkpoint, part: _Part) -> Checkpoint:
        """Store ``part`` and commit the checkpoint after it (and the file it closes)."""
        return self._commit_part(cp, part, self.sink, self.commit)

    def planned(self, cp: Checkpoint, part: _Part) -> Checkpoint:
        """The checkpoint ``commit_part`` will reach, but for what the sink answers
        (upload state, ETags, SHA-256) and the checksums: a dry run that stores and
        commits nothing."""
        return self._commit_part(cp, part, _DRY, _no_commit)

    def _commit_part(
        self, cp: Checkpoint, part: _Part, sink: Sink | _DrySink,
        commit: Callable[[Checkpoint], None],
    ) -> Checkpoint:
        spec, fmt = self.spec, self.fmt
        of = cp.open_file
        next_index = cp.next_file_index
        data = part.data
        if of is None:
            if part.rows == 0 and cp.files:
                # the table ended exactly where the last file was closed
                done = cp.evolve(done=True)
                commit(done)
                return done
            name = file_name(spec, next_index, fmt, self.compression)
            if sink is not _DRY:
                self.fence()
            of = OpenFile(
                index=next_index, name=name, first_key=part.first_key,
                sink_state=sink.start_file(name, cp.restarted_from),
            )
            next_index += 1
        closes = part.exhausted or (
            spec.max_file_size is not None and of.size + len(data) >= spec.max_file_size
        )
        if closes and not spec.stitched:  # a stitched file's footer is the stitch's
            metas = [m for p in of.parts for m in p.metas] + list(part.metas)
            footer = fmt.footer(self._schema, of.rows + part.rows, metas)
            if footer:  # (a join: data may be a pyarrow Buffer, see PartBytes)
                data = b"".join((data, self.compression.compress(footer)))
        parts = of.parts
        if data or not parts:
            number = of.next_part_number
            if sink is not _DRY:
                self.fence()
            etag = sink.put_part(of.name, of.sink_state, number, of.size, data)
            record = PartRecord(
                number=number, rows=part.rows, size=len(data),
                crc32c=0 if sink is _DRY else google_crc32c.value(data), etag=etag,
                last_key=part.last_key, metas=part.metas,
            )
            parts = (*parts, record)
            # the file's CRC from the part's (one pass over the bytes, not two)
            file_crc = crc32c_combine(of.crc32c, record.crc32c, len(data))
        else:
            # the table ended right after the last stored part and the format has no
            # footer: close the file without an empty part (S3 refuses those)
            file_crc = of.crc32c
        of = OpenFile(
            index=of.index,
            name=of.name,
            parts=parts,
            rows=of.rows + part.rows,
            size=of.size + len(data),
            crc32c=of.crc32c if sink is _DRY else file_crc,
            first_key=of.first_key if of.first_key is not None else part.first_key,
            sink_state=of.sink_state,
            closed=closes,
            last=part.exhausted,
        )
        new = cp.evolve(
            cursor=part.last_key if part.last_key is not None else cp.cursor,
            rows=cp.rows + part.rows,
            bytes=cp.bytes + len(data),
            open_file=of,
            next_file_index=next_index,
        )
        commit(new)
        return self._finish_file(new, sink, commit) if closes else new

    def finish_file(self, cp: Checkpoint) -> Checkpoint:
        """Make the closed open file final and record it; idempotent after a crash."""
        return self._finish_file(cp, self.sink, self.commit)

    def _finish_file(
        self, cp: Checkpoint, sink: Sink | _DrySink, commit: Callable[[Checkpoint], None]
    ) -> Checkpoint:
        of = cp.open_file
        assert of is not None and of.closed
        if sink is not _DRY:
            self.fence()
        sha256 = sink.complete_file(of.name, of.sink_state, of.size, parts=of.parts)
        record = FileRecord(
            name=of.name, rows=of.rows, size=of.size, crc32c=of.crc32c, sha256=sha256,
            parts=len(of.parts), first_key=of.first_key,
            last_key=cp.cursor if of.rows else None,
            metas=tuple(m for p in of.parts for m in p.metas) if self.spec.stitched else (),
        )
        new = cp.evolve(open_file=None, files=(*cp.files, record), done=of.last,
                        restarted_from=())
        commit(new)
        return new


def run_slice(
    task: Task, checkpoint: Checkpoint, deadline: float, *, keep_reading: bool = False
) -> Checkpoint:
    """Run ``task`` from ``checkpoint`` until ``deadline`` (a ``task.clock`` time) or done.

    Returns the last committed checkpoint. Stops at a part boundary; a part that would
    overrun the deadline by more than ``task.grace`` is dropped (never committed).

    With ``keep_reading`` a slice that ends well leaves the read-ahead running for the
    next slice of the same ``task`` in this process (the one-shot export's slices), which
    then goes on where it stopped instead of reading the next page again on a new
    thread; the caller ends it with ``task.close_pages()``. Nothing read ahead is
    committed unless a later slice consumes it, so this changes no output.
    """
    # a new owner first checks that the sink still holds the open file's parts
    cp = verify_open_file(task.sink, task.commit, checkpoint)
    progressed = cp.open_file is not None and cp.open_file.closed
    if progressed:
        cp = task.finish_file(cp)  # committed but not yet final (a crash came between)
    committer = _Committer(task, cp)
    ended = False
    try:
        _run(task, committer, cp, deadline, progressed)
        ended = True
    finally:
        if not (keep_reading and ended):
            task.close_pages()  # pages read ahead and not committed are dropped
        committer.close()
    try:
        cp = committer.result()
    except BaseException:
        task.close_pages()
        raise
    task.sink.release()  # every part stored is committed: the next writer may take over
    return cp


class _Committer:
    """Stores and commits parts on one thread, in the order they were handed over."""

    def __init__(self, task: Task, cp: Checkpoint) -> None:
        self._task, self.cp = task, cp
        self._pool: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None

    def _commit(self, part: _Part) -> None:
        self.cp = self._task.commit_part(self.cp, part)

    def wait(self) -> None:
        """Until the part handed over last is committed; raises what its commit raised."""
        if self._last is not None:
            last, self._last = self._last, None
            last.result()

    def submit(self, part: _Part) -> None:
        # at most one part is stored while the next is encoded: memory stays bounded
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="egress-commit")
        self._last = self._pool.submit(in_context(self._commit), part)

    def close(self) -> None:
        """Let the part in hand finish (or fail); a failure already raised is not raised
        again, and one that was not is kept for ``result``."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def result(self) -> Checkpoint:
        self.wait()
        return self.cp


def _run(
    task: Task, committer: _Committer, cp: Checkpoint, deadline: float, submitted: bool
) -> None:
    # ``cp`` runs one part ahead of the committer: the checkpoint once every part handed
    # over is committed, as far as encoding the next part needs to know (cursor, open
    # file, rows in it)
    while not cp.done:
        if task.should_stop() or (submitted and task.clock() >= deadline):
            break
        part = task.read_part(cp, droppable=submitted and task.rewinds, deadline=deadline)
        if part is None:
            break
        committer.submit(part)
        cp = task.planned(cp, part)
        submitted = True

"""Local-directory sink: parts are appended to a staged file, which is renamed when done.

The staged file lives in ``ROOT/.egress/staging/`` on the same file system, so the final
rename is atomic: a reader never sees a partial file under the final name. Storing
part *n* writes at the part's offset, which makes rewriting an uncommitted part after a
crash replace it; the file is cut to its committed size when it is completed.

Each writer (this sink object: one slice under one lease, or one one-shot run) writes
its own staged copy, handed from slice to slice without copying (sinks/staged.py): a
writer that lost its lease writes into no one else's bytes. Files started before that
(a ``sink_state`` without an ``id``) go on in the one shared staged file of old.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from egress.domain.checkpoint import PartRecord
from egress.domain.filenames import safe_base_name
from egress.exceptions import SinkError
from egress.sinks.oserrors import destination_error, writing
from egress.sinks.staged import StagedCopies, new_file_id

STAGING = Path(".egress") / "staging"


@dataclass
class _Digest:
    """The SHA-256 of the bytes this sink wrote to a staged file from offset 0 on, each
    exactly once and in order, updated on a thread of its own (hashlib releases the GIL)
    so the final file need not be read again."""

    hasher: hashlib._Hash
    size: int
    pending: Future[None] | None = None


class LocalSink:
    min_part_bytes = 0
    max_parts = None

    def for_export(self, *segments: str) -> LocalSink:
        """The same kind of sink under ``root/seg1/seg2…``, each segment made safe."""
        return LocalSink(self.root.joinpath(*(safe_base_name(s) for s in segments)),
                         fsync=self.fsync)

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True,
                 staging: bool = True) -> None:
        """``staging``: make the staging area (a writer's sink). A finalizer's sink does
        not: it may open after another finalizer removed the area, and a staging area
        made again for a completed export is one a late writer could write into."""
        self.root = Path(root).resolve()
        self.location = str(self.root)
        self.fsync = fsync
        try:
            (self.root / STAGING if staging else self.root).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise destination_error(exc, f"output directory {self.root} is not writable") from exc
        if not os.access(self.root, os.W_OK):
            raise SinkError(f"output directory {self.root} is not writable")
        self._digests: dict[str, _Digest] = {}
        self._hashing: ThreadPoolExecutor | None = None
        self._copies = StagedCopies(self.root / STAGING, fsync=fsync)

    def path(self, name: str) -> Path:
        """The final path of ``name``, which must stay inside the root."""
        path = (self.root / name).resolve()
        if path != self.root and self.root not in path.parents:
            raise SinkError(f"refusing a path outside the output directory: {name!r}")
        return path

    def _staged(self, name: str) -> Path:
        self.path(name)  # validates the name
        return self.root / STAGING / name.replace("/", "__")

    def start_file(self, name: str, earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """A new file's id; its staged copy is made by the first part (sinks/staged.py)."""
        self._staged(name)  # validates the name
        return {"id": new_file_id()}

    def put_part(
        self, name: str, state: dict[str, Any], number: int, offset: int, data: bytes
    ) -> str | None:
        """Write the part at its offset in this writer's staged copy, without truncating:
        bytes past the committed end (a part that was never committed) are cut in
        complete_file. A copy that is gone (its file was completed by another writer)
        is not made again.

        The part is hashed on the sink's thread while it is written, and both are done
        when this returns: no thread holds the part's bytes after its commit (they are
        a large share of an export's memory)."""
        pending = self._hash(name, offset, data)
        try:
            self._write_part(name, state, offset, data)
        except BaseException:
            self._digests.pop(name, None)  # it counted bytes that were not written
            raise
        finally:
            if pending is not None:
                pending.result()
        return None

    def _write_part(self, name: str, state: dict[str, Any], offset: int, data: bytes) -> None:
        legacy = not state.get("id")  # started before staged copies: one shared file
        staged = self._staged(name)
        try:
            if not legacy:
                staged = self._copies.target(name, state, offset)
            fd = os.open(staged, os.O_WRONLY | (os.O_CREAT if legacy else 0), 0o644)
            try:
                size = os.fstat(fd).st_size
                if size < offset:
                    raise SinkError(
                        f"staged file {staged} holds {size} bytes but {offset} were committed; "
                        "it was changed outside egress"
                    )
                _write_all(fd, data, offset)
                if self.fsync:
                    os.fsync(fd)
                    # The part is on disk: drop its pages from the page cache. An export
                    # writes far more than it reads back, and keeping gigabytes of output
                    # cached evicts what the database (often on this machine) keeps
                    # there; the freed pages are reused for the next part's writes.
                    os.posix_fadvise(fd, offset, len(data), os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except FileNotFoundError as exc:
            if legacy:
                raise destination_error(exc, f"cannot write {staged}") from exc
            # never made again: the file was completed or removed by another writer (this
            # one lost its task), or its export's staging area was removed
            raise SinkError(f"the staged copy {staged} is gone: another writer completed "
                            "or removed this file") from exc
        except OSError as exc:
            raise destination_error(exc, f"cannot write {staged}") from exc

    def complete_file(
        self, name: str, state: dict[str, Any], size: int, parts: Sequence[PartRecord] = ()
    ) -> str | None:
        final = self.path(name)
        staged: Path | None = self._staged(name)
        if state.get("id"):
            staged = self._completing(name, state, size, parts, final)
        if staged is not None and staged.exists():
            actual = staged.stat().st_size
            if actual < size:
                raise SinkError(f"staged file {staged} holds {actual} bytes, expected {size}")
            with writing(final):
                with open(staged, "r+b") as f:
                    f.truncate(size)  # drop bytes of a part that was never committed
                    if self.fsync:
                        os.fsync(f.fileno())
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, final)
            if state.get("id"):
                self._copies.drop(name)
                self._copies.remove_others(name, state, keep=None)  # a zombie's copy
        elif not final.exists() or final.stat().st_size != size:
            raise SinkError(f"neither a staged nor a final file for {name!r} of {size} bytes")
        digest = self._digests.pop(name, None)
        if digest is not None and digest.size == size:
            if digest.pending is not None:
                digest.pending.result()
            return digest.hasher.hexdigest()
        return sha256_file(final)  # written (in part) by another process: read it back

    def _hash(self, name: str, offset: int, data: bytes) -> Future[None] | None:
        """Start extending the running digest of ``name`` with a part written at
        ``offset`` (None: not hashed); a part anywhere but right after the hashed bytes
        (a resume, a rewrite) drops the digest."""
        digest = self._digests.get(name)
        if offset == 0:
            digest = self._digests[name] = _Digest(hashlib.sha256(), 0)
        elif digest is None or digest.size != offset:
            self._digests.pop(name, None)
            return None
        if self._hashing is None:
            self._hashing = ThreadPoolExecutor(1, thread_name_prefix="egress-sha256")
        digest.size += len(data)
        # one thread, and each part's update is awaited before the next part's: in order
        digest.pending = self._hashing.submit(digest.hasher.update, data)
        return digest.pending

    def verify_parts(self, name: str, state: dict[str, Any], parts: Sequence[PartRecord]) -> int:
        """Parts that fit in the staged file (sizes only: re-reading it every slice would
        cost as much as writing it); all of them if the file is already final. A copy
        is checked against the CRC32C when it is taken over (sinks/staged.py)."""
        if state.get("id"):
            self._copies.remember(name, parts)
            held_bytes = self._copies.held_bytes(name, state)
            if held_bytes is None:
                final = self.path(name)
                done = final.exists() and final.stat().st_size == sum(p.size for p in parts)
                return len(parts) if done else 0
            return _parts_within(parts, held_bytes)
        staged, final = self._staged(name), self.path(name)
        if not staged.exists():
            done = final.exists() and final.stat().st_size == sum(p.size for p in parts)
            return len(parts) if done else 0
        return _parts_within(parts, staged.stat().st_size)

    def abort_file(self, name: str, state: dict[str, Any]) -> None:
        self._digests.pop(name, None)
        staged = self._staged(name)
        with writing(staged, "remove"):
            staged.unlink(missing_ok=True)
            if state.get("id"):
                self._copies.drop(name)
                self._copies.remove_others(name, state, keep=None)

    def release(self) -> None:
        """The slice ended with every stored part committed: seal this writer's copies
        for the next writer to adopt (sinks/staged.py)."""
        with writing(self.root / STAGING):
            self._copies.seal()

    def remove_staging(self) -> None:
        """Remove the staging area (and ``.egress`` if that leaves it empty) once every
        file is final: a writer that lost its task and wakes later finds nowhere to write
        (staged copies are never made in a missing folder)."""
        shutil.rmtree(self.root / STAGING, ignore_errors=True)
        with contextlib.suppress(OSError):  # a stitched split's pieces' folder, emptied
            (self.root / STAGING).parent.joinpath("ranges").rmdir()
        with contextlib.suppress(OSError):
            (self.root / STAGING).parent.rmdir()

    def _completing(self, name: str, state: dict[str, Any], size: int,
                    parts: Sequence[PartRecord], final: Path) -> Path | None:
        """The staged copy to complete ``name`` from: this writer's, else one taken over
        (adopted, or copied and checked); None when there is no copy left (completed)."""
        mine = self._copies.mine(name)
        if mine is not None and mine.exists():
            return mine
        self._copies.drop(name)
        if final.exists() and final.stat().st_size == size:
            # completed before (a crash came before the checkpoint recorded it)
            self._copies.remove_others(name, state, keep=None)
            return None
        if not self._copies.copies(name, state):
            return None
        self._copies.remember(name, parts)
        with writing(final):
            return self._copies.target(name, state, size)

    def stitch_file(self, name: str, pieces: Sequence[tuple[str, int]], tail: bytes,
                    size: int) -> str:
        """Join ``pieces`` (``(name, size)`` of completed files, in order) and ``tail`` into
        the final file ``name`` of ``size`` bytes; remove the pieces; its SHA-256.

        The bytes are copied by the kernel (``copy_file_range``: a reflink where the file
        system shares extents, an in-kernel copy otherwise), never through Python, into a
        new file of this writer's own that takes the final name once complete and synced
        (``_new_file``): a kill leaves no half file under the final name and, where the
        file system has unnamed files, no file at all; a redo (the finalize is
        idempotent) finds the final file and only removes the pieces left. Two
        finalizers at once each build their own copy of the same bytes.
        """
        final = self.path(name)
        paths = [self.path(p) for p, _ in pieces]
        if not (final.exists() and final.stat().st_size == size):
            with writing(final):
                final.parent.mkdir(parents=True, exist_ok=True)
                fd = self._new_file(final, "stitch")
                try:
                    offset = 0
                    for path, (piece, expected) in zip(paths, pieces, strict=True):
                        try:
                            offset = _append_file(path, fd.fd, offset, expected)
                        except FileNotFoundError:
                            # another finalizer completed the file and removed it
                            if final.exists() and final.stat().st_size == size:
                                break
                            raise SinkError(f"the range piece {piece!r} of {name!r} "
                                            "is gone") from None
                    else:
                        _write_all(fd.fd, tail, offset)
                        if offset + len(tail) != size:
                            raise SinkError(f"stitched {name!r} holds {offset + len(tail)}"
                                            f" bytes, expected {size}")
                        if self.fsync:
                            os.fsync(fd.fd)
                        fd.publish(final)
                finally:
                    fd.close()
        for path in paths:
            with writing(path, "remove"):
                path.unlink(missing_ok=True)
        return sha256_file(final)

    def put_object(self, name: str, data: bytes) -> None:
        final = self.path(name)
        with writing(final):
            final.parent.mkdir(parents=True, exist_ok=True)
            fd = self._new_file(final, "put")
            try:
                _write_all(fd.fd, data, 0)
                if self.fsync:
                    os.fsync(fd.fd)
                fd.publish(final)
            finally:
                fd.close()

    def _new_file(self, final: Path, kind: str) -> _NewFile:
        """A file to be written whole, then given the name ``final`` at once: unnamed
        until then (``O_TMPFILE``), so that a kill at any moment leaves no name behind;
        where the file system has no unnamed files, a name of its own in the staging
        area (unique per writer: two finalizers of one export may write at once)."""
        spare = self._staged(f"{final.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            return _NewFile(os.open(final.parent, os.O_TMPFILE | os.O_WRONLY, 0o644), spare,
                            unnamed=True)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        spare.parent.mkdir(parents=True, exist_ok=True)
        return _NewFile(os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), spare,
                        unnamed=False)

    def get_object(self, name: str) -> bytes:
        try:
            return self.path(name).read_bytes()
        except OSError as exc:
            raise SinkError(f"cannot read {self.path(name)}: {exc}") from exc

    def list_files(self, folder: str) -> list[tuple[str, int]]:
        """``(name, size)`` of every file under ``folder/`` (written by someone else: a
        remote engine's unload), in name order."""
        base = self.path(folder)
        if not base.is_dir():
            return []
        return sorted((str(p.relative_to(self.root)), p.stat().st_size)
                      for p in base.rglob("*") if p.is_file())

    def open_reader(self, name: str, size: int) -> BinaryIO:
        return self.path(name).open("rb")

    def url_of(self, folder: str) -> str:
        """Where a remote engine writes ``folder`` of this sink (a path it shares)."""
        return self.path(folder).as_uri() + "/"

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def delete(self, name: str) -> None:
        path = self.path(name)
        with writing(path, "remove"):
            path.unlink(missing_ok=True)


@dataclass
class _NewFile:
    """An open file written whole before it takes its final name (LocalSink._new_file)."""

    fd: int
    #: the writer's own name in the staging area: the file's name while it is written
    #: (no O_TMPFILE), or for the moment of a rename over an existing final file
    spare: Path
    unnamed: bool

    def publish(self, final: Path) -> None:
        """Give the written file the name ``final`` atomically (replacing a file there)."""
        if self.unnamed:
            try:  # the common case: no final file yet, and the name appears complete
                self._link(final)
                return
            except FileExistsError:
                pass  # another writer's, or an earlier attempt's: replaced below
            self.spare.parent.mkdir(parents=True, exist_ok=True)
            self._link(self.spare)
            self.unnamed = False
        os.replace(self.spare, final)

    def _link(self, to: Path) -> None:
        # linkat(AT_SYMLINK_FOLLOW) of the descriptor's /proc link, as open(2) shows for
        # O_TMPFILE; os.link makes that call only when given a directory descriptor
        # (without one it calls link(2), which links the /proc link itself: EXDEV)
        folder = os.open(to.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.link(f"/proc/self/fd/{self.fd}", to.name, dst_dir_fd=folder,
                    follow_symlinks=True)
        finally:
            os.close(folder)

    def close(self) -> None:
        os.close(self.fd)
        if not self.unnamed:  # a named copy not renamed (an error, another's final)
            with contextlib.suppress(OSError):
                self.spare.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` until every byte is written: on a full disk ``pwrite`` writes what fits
    and returns the count, and only the next call raises ENOSPC (the real cause), which
    must come before any checkpoint counts these bytes."""
    view, done = memoryview(data), 0
    while done < len(data):
        written = os.pwrite(fd, view[done:], offset + done)
        if written <= 0:
            raise OSError(errno.EIO, "the file system accepted no more bytes")
        done += written


def _append_file(source: Path, fd: int, offset: int, size: int) -> int:
    """Copy ``source`` (``size`` bytes) to ``fd`` at ``offset`` in the kernel; the end."""
    with open(source, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        if actual != size:
            raise SinkError(f"{source} holds {actual} bytes, expected {size}")
        done = 0
        while done < size:
            n = os.copy_file_range(f.fileno(), fd, size - done, done, offset + done)
            if n <= 0:
                raise OSError(errno.EIO, f"copy_file_range stopped at {done} of {size}")
            done += n
    return offset + size


def _parts_within(parts: Sequence[PartRecord], held: int) -> int:
    """How many of ``parts``, from the first, end within ``held`` bytes."""
    end = agreed = 0
    for p in parts:
        end += p.size
        if end > held:
            break
        agreed += 1
    return agreed


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

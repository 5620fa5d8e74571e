"""Before a slice continues an open file, the sink confirms it still holds the
checkpoint's parts (S3: ListParts). When it does not — an upload aborted by a lifecycle
rule or an operator, a part replaced by someone else — the mismatch is logged and the
file is rewound to the last part both agree on: the cursor goes back to that part's last
key and the next parts are read and uploaded again. Nothing before that part is resent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from egress.domain.checkpoint import Checkpoint, OpenFile
from egress.domain.crc import crc32c_concat
from egress.sinks.base import Sink

log = logging.getLogger(__name__)


def verify_open_file(
    sink: Sink, commit: Callable[[Checkpoint], None], cp: Checkpoint
) -> Checkpoint:
    """``cp`` if the sink holds every part of its open file; else the rewound checkpoint,
    committed (so the repair survives a crash that follows it)."""
    of = cp.open_file
    if of is None or not of.parts:
        return cp
    agreed = sink.verify_parts(of.name, of.sink_state, of.parts)
    if agreed >= len(of.parts):
        return cp
    new = rewind_open_file(cp, agreed)
    kept = len(new.open_file.parts) if new.open_file else 0
    log.warning(
        "sink does not hold the checkpoint's parts; rewinding file=%s parts=%d agreed=%d kept=%d",
        of.name, len(of.parts), agreed, kept,
        extra={"file": of.name, "parts": len(of.parts), "agreed": agreed, "kept": kept},
    )
    if new.open_file is None:
        sink.abort_file(of.name, of.sink_state)  # the file restarts with a fresh upload
    commit(new)
    return new


def rewind_open_file(cp: Checkpoint, agreed: int) -> Checkpoint:
    """The checkpoint as it was right after part ``agreed`` of the open file was committed
    (before the file was opened when ``agreed`` is 0 or that part's key is unknown)."""
    of = cp.open_file
    assert of is not None
    kept, dropped = of.parts[:agreed], of.parts[agreed:]
    if not kept or kept[-1].last_key is None:
        start = cp.files[-1].last_key if cp.files else None
        earlier = (*cp.restarted_from, of.sink_state) if of.sink_state else cp.restarted_from
        return cp.evolve(
            cursor=start, rows=cp.rows - of.rows, bytes=cp.bytes - of.size,
            open_file=None, next_file_index=of.index, done=False,
            restarted_from=earlier,
        )
    rewound = OpenFile(
        index=of.index,
        name=of.name,
        parts=kept,
        rows=sum(p.rows for p in kept),
        size=sum(p.size for p in kept),
        crc32c=crc32c_concat((p.crc32c, p.size) for p in kept),
        first_key=of.first_key,
        sink_state=of.sink_state,
    )
    return cp.evolve(
        cursor=kept[-1].last_key,
        rows=cp.rows - sum(p.rows for p in dropped),
        bytes=cp.bytes - sum(p.size for p in dropped),
        open_file=rewound,
        done=False,
    )

"""Which allocator Arrow uses in an egress process.

Arrow's bundled mimalloc keeps memory it freed for reuse: an export that encodes one
part after another then peaks about 90 MB higher than with the C library's malloc, for
no speed gain (measured with bench/run.py). The CLI, the worker and the server choose
the system allocator at start-up; ``ARROW_DEFAULT_MEMORY_POOL`` still decides if set.
A program that calls ``egress.export`` as a library keeps its own choice.

The buffers a Parquet part is encoded into come from a pool of their own
(``part_buffer_pool``), and the CLI ends its process without the interpreter's last
garbage collections (``skip_final_collections``).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def use_system_allocator() -> None:
    """Before pyarrow is imported, through the variable Arrow reads when it makes its
    default pool (a command that never needs Arrow, such as ``egress jobs ls``, does not
    pay 0.1 s to import it); after, by setting the pool."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    arrow = sys.modules.get("pyarrow")
    if arrow is None:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    else:
        arrow.set_memory_pool(arrow.system_memory_pool())


_part_pool: pa.MemoryPool | None = None


def part_buffer_pool() -> pa.MemoryPool:
    """The pool of the buffers pyarrow encodes a Parquet part into (one a part, 9 MiB
    uncompressed, alive until the part is stored): jemalloc's, where this pyarrow has
    it. Taken from the C library's heap, between the small allocations of everything
    else, they left 110-140 MB of freed memory held at the peak of a 5M-row export
    (231-241 MB of RSS); in jemalloc's own arenas the peak was 172-180 MB, for ~1 s more
    system CPU (docs/benchmarks.md, session 27). Fresh pages from ``mmap`` for each
    buffer instead would cost 18 ms a part in page faults on this machine."""
    global _part_pool
    import pyarrow as pa

    if _part_pool is None:
        try:
            _part_pool = pa.jemalloc_memory_pool()
        except NotImplementedError:  # a pyarrow built without jemalloc
            _part_pool = pa.default_memory_pool()
    return _part_pool


def skip_final_collections() -> None:
    """Called once a command has finished, just before its process exits: the
    interpreter's exit then does not walk every object still alive (pyarrow's, numpy's,
    the export's own) looking for cycles, which took 0.1 s after a 1M-row export and
    0.25 s after 5M rows (docs/benchmarks.md, session 27). Objects are still freed by
    their reference counts, and files and connections are closed by their owners before
    this; only cyclic garbage is left for the operating system to reclaim."""
    gc.freeze()

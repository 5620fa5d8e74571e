"""Which allocator Arrow uses in an egress process.

Arrow's bundled mimalloc keeps memory it freed for reuse: an export that encodes one
part after another then peaks about 90 MB higher than with the C library's malloc, for
no speed gain (measured with bench/run.py). The CLI, the worker and the server choose
the system allocator at start-up; ``ARROW_DEFAULT_MEMORY_POOL`` still decides if set.
A program that calls ``egress.export`` as a library keeps its own choice.

The CLI also ends its process without the interpreter's last garbage collections
(``skip_final_collections``).
"""

from __future__ import annotations

import gc
import os

import pyarrow as pa


def use_system_allocator() -> None:
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())


def skip_final_collections() -> None:
    """Called once a command has finished, just before its process exits: the
    interpreter's exit then does not walk every object still alive (pyarrow's, numpy's,
    the export's own) looking for cycles, which took 0.1 s after a 1M-row export and
    0.25 s after 5M rows (docs/benchmarks.md, session 27). Objects are still freed by
    their reference counts, and files and connections are closed by their owners before
    this; only cyclic garbage is left for the operating system to reclaim."""
    gc.freeze()

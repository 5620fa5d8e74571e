"""Which allocator Arrow uses in an egress process.

Arrow's bundled mimalloc keeps memory it freed for reuse: an export that encodes one
part after another then peaks about 90 MB higher than with the C library's malloc, for
no speed gain (measured with bench/run.py). The CLI, the worker and the server choose
the system allocator at start-up; ``ARROW_DEFAULT_MEMORY_POOL`` still decides if set.
A program that calls ``egress.export`` as a library keeps its own choice.
"""

from __future__ import annotations

import os

import pyarrow as pa


def use_system_allocator() -> None:
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())

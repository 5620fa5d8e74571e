"""Modules that a driver imports but egress never uses, loaded only when first touched.

``adbc_driver_manager.dbapi`` imports ``pyarrow.dataset`` at start-up for its bulk
ingest (``adbc_ingest`` of a Dataset or Scanner), which egress never calls. That import
maps Arrow's dataset, Acero, Substrait and ORC libraries: 7 MB of every export's peak
RSS (docs/benchmarks.md). :func:`defer` puts a stand-in in ``sys.modules`` that imports
the real module at its first use, so a program that does use ``pyarrow.dataset`` gets
all of it. (The standard library's ``importlib.util.LazyLoader`` does not do here: on
Python 3.11 a second ``import`` of a lazy module reads its ``__spec__``, which loads it.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

#: What the sources defer when they are imported.
DEFERRED = ("pyarrow.dataset",)


class _Deferred(types.ModuleType):
    """Stands in ``sys.modules`` for a module not yet run. The first attribute asked of
    it that it lacks imports the real module, which takes its place everywhere."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)  # also sets it on its parent package
        return getattr(real, attr)


def defer(name: str) -> None:
    """Make ``import name`` cheap until the module is used (nothing happens if it is
    imported already or cannot be found)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)  # imports the parent package
    if spec is None:
        return
    stub = _Deferred(name)
    stub.__spec__ = spec  # not ``_initializing``: ``import name`` takes it as it is
    sys.modules[name] = stub
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, stub)

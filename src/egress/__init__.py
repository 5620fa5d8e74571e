"""egress: long exports of large databases as durable, resumable, exactly-once jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from egress._version import __version__

if TYPE_CHECKING:
    from egress.oneshot import ExportResult, export


def __getattr__(name: str) -> Any:
    # ``egress.export`` is the real function (its signature and docstring for help()), but
    # loaded on first use: importing egress (every CLI start) stays cheap
    if name in ("export", "ExportResult"):
        from egress import oneshot

        return getattr(oneshot, name)
    raise AttributeError(f"module 'egress' has no attribute {name!r}")


__all__ = ["ExportResult", "__version__", "export"]

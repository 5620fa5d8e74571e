"""egress: long exports of large databases as durable, resumable, exactly-once jobs."""

from __future__ import annotations

from egress._version import __version__


def export(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Export tables of a database in-process; see :func:`egress.oneshot.export`."""
    from egress.oneshot import export as _export

    return _export(*args, **kwargs)


__all__ = ["__version__", "export"]

"""Numbers, sizes, durations and times as the page shows them (Jinja filters)."""

from __future__ import annotations

import datetime as dt

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "–"
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def human_count(n: int | float | None) -> str:
    return "–" if n is None else f"{round(n):,}".replace(",", "\u202f")


def human_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    s = max(round(s), 0)
    hours, rest = divmod(s, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def human_time(value: dt.datetime | float | None) -> str:
    """UTC, to the second (the page's script shows it in the reader's time zone)."""
    if value is None:
        return "–"
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(value: dt.datetime | float | None) -> str:
    if value is None:
        return ""
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    return value.isoformat()


def percent(done: int | None, total: int | None, status: str = "") -> int:
    """0–100 for a progress bar; a completed export is 100 whatever the estimate said."""
    if status in ("completed", "expired"):
        return 100
    if not total or done is None:
        return 0
    return max(0, min(100, int(done * 100 / total)))


FILTERS = {
    "bytes": human_bytes, "count": human_count, "seconds": human_seconds,
    "time": human_time, "iso": iso_time,
}

"""Option types shared by the subcommands: sizes such as ``64MB`` or ``1GiB``."""

from __future__ import annotations

import re
from typing import Any

import click

#: Decimal units (kB, MB, GB, TB) are powers of 1000; binary units (KiB…) and the bare
#: letters K, M, G, T (as ``du`` and ``ls -h`` print them) are powers of 1024.
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class Size(int):
    """A byte count that remembers how the user wrote it (for the printed resume command)."""

    text: str

    def __new__(cls, value: int, text: str | None = None) -> Size:
        obj = super().__new__(cls, value)
        obj.text = str(value) if text is None else text
        return obj


def parse_size(text: str) -> Size:
    """``"64MB"`` → 64000000, ``"1GiB"`` → 1073741824, ``"1.5M"`` → 1572864.

    Raises ValueError with a message that says what is allowed.
    """
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a size; write a number with an optional unit: "
            "B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB, K, M, G, T (of 1024)"
        )
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return Size(value, text.strip())


class SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Size:
        if isinstance(value, Size):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return Size(value, str(value))
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()


def parse_delimiter(text: str) -> str:
    """A CSV delimiter; ``\\t`` and ``tab`` mean a tab, which is awkward to type in a shell."""
    if text in ("\\t", "tab", "TAB"):
        return "\t"
    return text

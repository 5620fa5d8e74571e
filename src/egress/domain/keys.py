"""Key values as JSON: the cursor of a checkpoint must survive a trip through any store.

Each key column value is stored as ``[tag, text]`` so that its exact Python type comes
back (an int is not a float, a datetime keeps its time zone, bytes stay bytes).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

KeyValue = Any
Key = tuple[KeyValue, ...]


def encode_value(value: KeyValue) -> list[str]:
    # bool before int: bool is a subclass of int.
    if isinstance(value, bool):
        return ["bool", "1" if value else "0"]
    if isinstance(value, int):
        return ["int", str(value)]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, decimal.Decimal):
        return ["decimal", str(value)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytes):
        return ["bytes", base64.b64encode(value).decode("ascii")]
    if isinstance(value, dt.datetime):
        return ["datetime", value.isoformat()]
    if isinstance(value, dt.date):
        return ["date", value.isoformat()]
    if isinstance(value, dt.time):
        return ["time", value.isoformat()]
    raise TypeError(f"cannot use a value of type {type(value).__name__} as a key")


def decode_value(item: list[str]) -> KeyValue:
    tag, text = item
    decoders: dict[str, Callable[[str], KeyValue]] = {
        "bool": lambda t: t == "1",
        "int": int,
        "float": float,
        "decimal": decimal.Decimal,
        "str": str,
        "bytes": base64.b64decode,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "time": dt.time.fromisoformat,
    }
    return decoders[tag](text)


def encode_key(key: Key | None) -> list[list[str]] | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(data: list[list[str]] | None) -> Key | None:
    return None if data is None else tuple(decode_value(item) for item in data)

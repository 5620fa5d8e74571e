"""The JSON form of worker store calls, for the API's worker routes (``over_api.py`` sends,
``api/routes/worker.py`` answers).

JSON has no tuples, enums, bytes or records: those travel as ``{"$t": kind, "v": …}``,
and a plain dict that happens to hold a ``"$t"`` key (user data in a manifest or options)
is wrapped the same way, so decoding is never ambiguous. Only the record types listed here
are ever built on decode: a caller cannot make the server instantiate anything else.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
from typing import Any

from egress.domain.deliveries import (
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryRecord,
    DeliveryState,
    WebhookSecret,
)
from egress.domain.jobs import ExportRecord, ExportState, Heartbeat, TaskRecord, TaskState
from egress.exceptions import EgressError

_TAG = "$t"
_RECORDS: dict[str, type] = {cls.__name__: cls for cls in (
    ExportRecord, TaskRecord, Heartbeat, DeliveryRecord, DeliveryAttempt, WebhookSecret)}
_ENUMS: dict[str, type[enum.Enum]] = {cls.__name__: cls for cls in (
    ExportState, TaskState, DeliveryState, AttemptOutcome)}


class WireError(EgressError):
    """A store call or answer that is not in the wire form (a version mismatch between
    the worker and the API, or a request not made by egress)."""


def encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):  # before str: StrEnum members are strings too
        name = type(value).__name__
        if name not in _ENUMS:
            raise WireError(f"cannot send a {name}")
        return {_TAG: "enum", "c": name, "v": value.value}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if name not in _RECORDS:
            raise WireError(f"cannot send a {name}")
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_TAG: "record", "c": name, "v": fields}
    if isinstance(value, tuple):
        return {_TAG: "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise WireError("cannot send a dict whose keys are not all strings")
        plain = {k: encode(v) for k, v in value.items()}
        return {_TAG: "dict", "v": plain} if _TAG in value else plain
    if isinstance(value, bytes):
        return {_TAG: "bytes", "v": base64.b64encode(value).decode()}
    raise WireError(f"cannot send a {type(value).__name__}")


def decode(value: Any, *, strict: bool = True) -> Any:
    """``strict``: a record with fields this version does not know is refused (the API
    side); otherwise they are dropped (a worker reading the answer of a newer API, which
    is upgraded first)."""
    if isinstance(value, list):
        return [decode(v, strict=strict) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(_TAG)
    if kind is None:
        return {k: decode(v, strict=strict) for k, v in value.items()}
    try:
        inner = value["v"]
        if kind == "dict":
            return {k: decode(v, strict=strict) for k, v in inner.items()}
        if kind == "tuple":
            return tuple(decode(v, strict=strict) for v in inner)
        if kind == "bytes":
            return base64.b64decode(inner)
        if kind == "enum":
            return _ENUMS[value["c"]](inner)
        if kind == "record":
            cls = _RECORDS[value["c"]]
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = set(inner) - names
            if unknown and strict:
                raise WireError(f"unknown fields of {cls.__name__}: {', '.join(sorted(unknown))}"
                                " (are the worker and the API the same egress version?)")
            return cls(**{k: decode(v, strict=strict) for k, v in inner.items() if k in names})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WireError(f"malformed {kind!r} value: {exc}") from None
    raise WireError(f"unknown wire type {kind!r}")

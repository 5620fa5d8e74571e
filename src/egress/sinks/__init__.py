"""Sinks by URL scheme. ``open_sink`` is how the rest of egress opens a destination.

A plain path (or ``file://``) is a local directory; ``s3://bucket/prefix`` is an
S3-compatible bucket (AWS S3, GCS interoperability, R2, MinIO, Ceph). An unknown scheme's
error lists the known ones.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from egress.exceptions import ConfigError, UnknownNameError
from egress.sinks.base import Sink


def _open_local(url: str, settings: dict[str, Any]) -> Sink:
    from egress.sinks.local import LocalSink

    parts = urlsplit(url)
    path = unquote(parts.path) if parts.scheme == "file" else url
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise ConfigError(f"a file:// URL must name a local path, got host {parts.netloc!r}")
    return LocalSink(path, **settings)


def _open_s3(url: str, settings: dict[str, Any]) -> Sink:
    from egress.sinks.s3 import S3Sink

    parts = urlsplit(url)
    if not parts.netloc:
        raise ConfigError(f"an S3 destination is s3://bucket/prefix, got {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"an S3 destination takes no query or fragment: {url!r}")
    return S3Sink(parts.netloc, unquote(parts.path), **settings)


SINK_KINDS: dict[str, Callable[[str, dict[str, Any]], Sink]] = {
    "file": _open_local,
    "s3": _open_s3,
}


def sink_scheme(url_or_path: str | os.PathLike[str]) -> str:
    """``s3`` for ``s3://…``; ``file`` for ``file://…`` and for plain paths."""
    text = os.fspath(url_or_path)
    return text.split("://", 1)[0].lower() if "://" in text else "file"


def is_local(url_or_path: str | os.PathLike[str]) -> bool:
    return sink_scheme(url_or_path) == "file"


def open_sink(url_or_path: str | os.PathLike[str], **settings: Any) -> Sink:
    """The sink for a destination. ``settings`` go to the sink's constructor (local:
    ``fsync``; S3: ``endpoint_url``, ``region``, ``min_part_bytes``, ``checksum``, …)."""
    scheme = sink_scheme(url_or_path)
    try:
        opener = SINK_KINDS[scheme]
    except KeyError:
        raise UnknownNameError("destination scheme", scheme, SINK_KINDS) from None
    try:
        return opener(os.fspath(url_or_path), settings)
    except TypeError as exc:
        raise ConfigError(f"bad settings for a {scheme} destination: {exc}") from exc


_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _typed(cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """Settings given as text (``EGRESS_DESTINATION_<NAME>_<SETTING>`` variables) as the
    type of the parameter's default: ``"5242880"`` → 5242880 for ``min_part_bytes``."""
    params = inspect.signature(cls).parameters
    typed = dict(settings)
    for key, value in settings.items():
        default = params[key].default if key in params else None
        if not isinstance(value, str) or default is None or isinstance(default, str):
            continue
        try:
            if isinstance(default, bool):
                typed[key] = _BOOLEANS[value.strip().lower()]
            elif isinstance(default, int | float):
                typed[key] = type(default)(value)
        except (KeyError, ValueError):
            raise ConfigError(f"bad value for the destination setting {key}: {value!r}; "
                              f"it takes a {type(default).__name__}") from None
    return typed


def sink_from_destination(dest: Mapping[str, Any]) -> Sink:
    """The sink of a configured destination (``[destinations.NAME]`` in egress.toml):
    ``type = "local"`` with ``path``, or ``type = "s3"`` with ``bucket``, ``prefix`` and
    any S3 setting (``endpoint_url``, ``region``, ``min_part_bytes``, …)."""
    settings = {k: v for k, v in dest.items() if k != "type"}
    kind = dest.get("type", "local")
    if kind == "local":
        if "path" not in settings:
            raise ConfigError("a local destination needs a path")
        return _open_local(os.fspath(settings.pop("path")), settings)
    if kind == "s3":
        from egress.sinks.s3 import S3Sink

        if "bucket" not in settings:
            raise ConfigError("an s3 destination needs a bucket")
        try:
            return S3Sink(settings.pop("bucket"), settings.pop("prefix", ""),
                          **_typed(S3Sink, settings))
        except TypeError as exc:
            raise ConfigError(f"bad settings for an s3 destination: {exc}") from exc
    raise UnknownNameError("destination type", str(kind), ("local", "s3"))


__all__ = ["SINK_KINDS", "Sink", "is_local", "open_sink", "sink_from_destination", "sink_scheme"]

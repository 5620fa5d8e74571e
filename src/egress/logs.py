"""Log output of the long-running commands: JSON lines for collectors, or one readable
``key=value`` line per event on a terminal.

Only the CLI installs handlers; library code logs through ``logging.getLogger(__name__)``
with ``extra={...}`` fields and never formats secrets into messages. Ids that belong to a
piece of work (``worker_id``, ``export_id``, ``task_id``) are bound once with
:func:`bound` and land on every line logged inside it, by any module. Secrets are masked
at one choke point, :func:`egress.redact.redact`, which both formats apply to every line.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from egress.exceptions import ConfigError
from egress.redact import redact

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
#: fields libraries add for their own formatters (uvicorn's ANSI-coloured copy of the message)
_DROPPED = {"color_message"}
#: libraries whose INFO lines are chatter here (Alembic's "setup plugin" lines, boto's
#: credential lookups, HTTP clients' per-request lines): only their warnings are shown
QUIET_LIBRARIES = ("alembic", "botocore", "boto3", "s3transfer", "urllib3", "httpx", "httpcore")
#: ``--log-format`` / ``EGRESS_LOG_FORMAT``: auto is text on a terminal, JSON otherwise
LOG_FORMATS = ("auto", "json", "text")

_bound: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "egress_log_fields", default=MappingProxyType({}))
T = TypeVar("T")


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Every line logged in this block (this thread, and threads started with
    :func:`in_context`) carries ``fields``."""
    token = _bound.set({**_bound.get(), **fields})
    try:
        yield
    finally:
        _bound.reset(token)


def in_context(target: Callable[..., T]) -> Callable[..., T]:
    """``target`` run in a copy of the caller's context: a thread started with it logs
    with the ids bound where it was started (threads start with an empty context)."""
    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return context.run(target, *args, **kwargs)

    return run


class BoundFields(logging.Filter):
    """Adds the bound ids to each record (a field given in ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _bound.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and k not in _DROPPED}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{self.formatTime(record)} {record.levelname.lower()} {record.name}: "
        base += record.getMessage()
        fields = _fields(record)
        if fields:
            base += " " + " ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
        if record.exc_info:
            base += "\n" + (record.exc_text or self.formatException(record.exc_info))
        # extra fields are set after the record factory redacted the message: redact all
        return redact(base)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the record's fields, ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            line.setdefault(key, value if isinstance(value, int | float | bool | None)
                            else str(value))
        if record.exc_info:
            line["exception"] = record.exc_text or self.formatException(record.exc_info)
        # redacted as text: a secret is masked wherever in the line it hides
        return redact(json.dumps(line, ensure_ascii=False))


def log_format(requested: str | None = None, stream: Any = None) -> str:
    """``json`` or ``text``: as asked (``--log-format``, else ``EGRESS_LOG_FORMAT``, else
    auto: text when ``stream`` is a terminal)."""
    choice = (requested or os.environ.get("EGRESS_LOG_FORMAT") or "auto").lower()
    if choice not in LOG_FORMATS:
        raise ConfigError(f"bad log format {choice!r}; allowed: {', '.join(LOG_FORMATS)}")
    if choice == "auto":
        stream = sys.stderr if stream is None else stream
        return "text" if getattr(stream, "isatty", lambda: False)() else "json"
    return choice


def setup_logging(level: str = "INFO", fmt: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    chosen = log_format(fmt, sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else KeyValueFormatter())
    handler.addFilter(BoundFields())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if logging.getLevelName(level.upper()) != logging.DEBUG:
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)
    # botocore logs request and presigned signatures at DEBUG: filtered out everywhere
    from egress.redact import install_log_redaction

    install_log_redaction()

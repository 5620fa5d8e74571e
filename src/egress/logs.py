"""Log output for the command line: one line per event with stable ``key=value`` fields.

Only the CLI installs handlers; library code logs through ``logging.getLogger(__name__)``
with ``extra={...}`` fields and never formats secrets into messages.
"""

from __future__ import annotations

import logging
import sys

from egress.redact import redact

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
#: fields libraries add for their own formatters (uvicorn's ANSI-coloured copy of the message)
_DROPPED = {"color_message"}
#: libraries whose INFO lines are chatter here (Alembic's "setup plugin" lines, boto's
#: credential lookups, HTTP clients' per-request lines): only their warnings are shown
QUIET_LIBRARIES = ("alembic", "botocore", "boto3", "s3transfer", "urllib3", "httpx", "httpcore")


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{self.formatTime(record)} {record.levelname.lower()} {record.name}: "
        base += record.getMessage()
        fields = {k: v for k, v in vars(record).items()
                  if k not in _STANDARD and k not in _DROPPED}
        if fields:
            base += " " + " ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
        if record.exc_info:
            base += "\n" + (record.exc_text or self.formatException(record.exc_info))
        # extra fields are set after the record factory redacted the message: redact all
        return redact(base)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if logging.getLevelName(level.upper()) != logging.DEBUG:
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)
    # botocore logs request and presigned signatures at DEBUG: filtered out everywhere
    from egress.redact import install_log_redaction

    install_log_redaction()

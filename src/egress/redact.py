"""Log filters that keep credentials of third-party libraries out of the logs.

botocore logs at DEBUG every request signature it computes (``Signature:\\n<hex>``; for a
presigned URL that is the URL's ``X-Amz-Signature``, a credential until it expires) and
the headers of every request it sends (``Authorization: … Signature=…``,
``X-Amz-Security-Token``). These filters sit on those loggers, whatever handlers the
application installs: the signature records are dropped, the others redacted.
"""

from __future__ import annotations

import logging
import re

_SECRETS = re.compile(
    r"(Signature=|X-Amz-Signature=|X-Amz-Credential=|x-amz-security-token['\"]?:\s*b?['\"]"
    r"|X-Amz-Security-Token=)[^\s,'\"&>]+",
    re.IGNORECASE,
)
#: botocore loggers whose DEBUG records can carry signatures or session tokens.
LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.hooks", "botocore.parsers",
           "urllib3.connectionpool")


def redact(text: str) -> str:
    return _SECRETS.sub(lambda m: m.group(1) + "***", text)


class RedactSigning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "botocore.auth":
            message = str(record.msg)
            # "Signature:\n<hex>" and the like: nothing else in them
            return not message.startswith(("Signature", "Calculating signature"))
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is dropped, not risked
            return False
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_installed = RedactSigning()


def install_log_redaction() -> None:
    """Idempotent: attach the filter to the loggers that need it."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _installed not in logger.filters:
            logger.addFilter(_installed)

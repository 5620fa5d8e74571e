"""The one place that masks credentials in text: URLs, DSNs, errors, log records.

Everything that leaves egress as text goes through :func:`redact` — error text recorded
in the store, API problems, log records (a record factory installed by
:func:`install_log_redaction`), CLI errors and manifests. It masks:

- the password of a URL's userinfo (``postgresql://user:***@host/db``). libpq ends the
  userinfo at the first ``@`` before any ``/`` and gives ``#`` no meaning; Python's
  ``urlsplit`` at the last ``@`` and at a ``#``. A password with an unencoded ``@``,
  ``/`` or ``#`` is read differently by each, so everything from the user's ``:`` to the
  last ``@`` before the query string is masked: a superset of both readings;
- credential parameters wherever they appear: ``password=``, ``sslpassword=`` and
  ``passfile=`` in a URL's query string or a libpq ``key=value`` DSN (quoted values too);
- botocore's request and presigned signatures and session tokens.

botocore also logs at DEBUG every request signature it computes (``Signature:\\n<hex>``):
those records are dropped by a filter on its loggers.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
#: libpq connection parameters whose values are credentials (or where they are kept).
CREDENTIAL_KEYS = ("password", "sslpassword", "passfile")

_SIGNATURES = re.compile(
    r"(Signature=|X-Amz-Signature=|X-Amz-Credential=|x-amz-security-token['\"]?:\s*b?['\"]"
    r"|X-Amz-Security-Token=)[^\s,'\"&>]+",
    re.IGNORECASE,
)
# key=value (DSN) or ?key=value / &key=value (URL): a quoted DSN value, or up to a
# separator. \b keeps "password" from matching inside "sslpassword".
_CREDENTIALS = re.compile(
    r"\b(" + "|".join(CREDENTIAL_KEYS) + r")(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s]+")
# Where a URL's query string starts: "?" followed by a parameter name and "=".
_QUERY = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*=")
#: botocore loggers whose DEBUG records can carry signatures or session tokens.
LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.hooks", "botocore.parsers",
           "urllib3.connectionpool")


def _userinfo_end(rest: str) -> int:
    """Index of the ``@`` that ends a URL's userinfo (``rest`` follows ``://``), or -1:
    the last ``@`` before the query string (an ``@`` in a parameter is not userinfo)."""
    query = _QUERY.search(rest)
    return rest.rfind("@", 0, query.start() if query else len(rest))


def _mask_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    at = _userinfo_end(rest) if sep else -1
    if at < 0:
        return url
    user, colon, _password = rest[:at].partition(":")
    if not colon or "/" in user or "?" in user:
        return url  # a user without a password, or no userinfo at all
    return f"{scheme}://{user}:{MASK}@{rest[at + 1:]}"


def _mask_credentials(text: str) -> str:
    return _CREDENTIALS.sub(lambda m: m.group(1) + m.group(2) + MASK, text)


def redact_url(url: str) -> str:
    """A URL or libpq DSN with every credential masked: safe for logs, errors, manifests."""
    return _mask_credentials(_mask_userinfo(url))


def without_password(url: str) -> str:
    """``postgresql://u:secret@h/db`` → ``postgresql://u@h/db`` (libpq then reads PGPASSWORD)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


def redact(text: str) -> str:
    """Free text (an error message, a log line) with every credential masked."""
    text = _URL.sub(lambda m: _mask_userinfo(m.group(0)), text)
    return _SIGNATURES.sub(lambda m: m.group(1) + MASK, _mask_credentials(text))


def url_secrets(url: str) -> list[str]:
    """The secret strings of a connection URL or DSN, longest first, as libpq and Python
    read them (raw and percent-decoded): to scrub driver messages that echo a part."""
    found: set[str] = set()
    _scheme, sep, rest = url.partition("://")
    at = _userinfo_end(rest) if sep else -1
    if at >= 0 and ":" in rest[:at]:
        password = rest[:at].partition(":")[2]
        # libpq keeps only the text before the first "@"; the rest becomes the host
        found.update({password, *password.split("@"), *password.split("/")})
    with contextlib.suppress(ValueError):  # a port that is not a number
        found.add(urlsplit(url).password or "")
    for m in _CREDENTIALS.finditer(url):
        found.add(m.group(3).strip("'"))
    if sep:
        # a URL's query string, as libpq splits it (on "&" and the first "=", no fragment)
        for item in rest.partition("?")[2].split("&"):
            key, eq, value = item.partition("=")
            if eq and unquote(key) in CREDENTIAL_KEYS:
                found.add(value)
    else:
        # a key=value DSN: libpq's own reading (psycopg is imported only for this form)
        try:
            from psycopg.conninfo import conninfo_to_dict

            parsed = conninfo_to_dict(url)
            found.update(str(parsed.get(key) or "") for key in CREDENTIAL_KEYS)
        except Exception:  # not a libpq string: the textual reading above stands
            pass
    found |= {unquote(s) for s in found}
    # very short fragments would mangle every message they occur in
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` redacted, and with each of ``secrets`` (see :func:`url_secrets`) masked."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return redact(text)


class RedactSigning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "botocore.auth":
            message = str(record.msg)
            # "Signature:\n<hex>" and the like: nothing else in them
            return not message.startswith(("Signature", "Calculating signature"))
        return True


_installed = RedactSigning()
_factory: Any = None


def _redacting_factory(base: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = base(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # let the handler report a bad record as it always does
            return record
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            # formatters use exc_text when set: the traceback's messages, redacted
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    return make


def install_log_redaction() -> None:
    """Idempotent: every log record's message and traceback is redacted when it is made
    (whatever handler writes it), and botocore's signature records are dropped."""
    global _factory
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _installed not in logger.filters:
            logger.addFilter(_installed)
    if logging.getLogRecordFactory() is not _factory:
        _factory = _redacting_factory(logging.getLogRecordFactory())
        logging.setLogRecordFactory(_factory)

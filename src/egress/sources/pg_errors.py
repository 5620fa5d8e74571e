"""Why a connection to PostgreSQL failed, said plainly: the class of error decides both
the words and whether a worker retries (an unreachable server may come back; a refused
password will not).

The server's answer carries a SQLSTATE (``28P01`` wrong password, ``28000`` a login the
server does not accept, ``3D000`` no such database); libpq's own failures (no password
to send, connection refused, timeout, TLS) carry none and are told apart by their text.
"""

from __future__ import annotations

import re

from egress.exceptions import SourceAccessError, SourceError, SourceUnavailableError
from egress.redact import redact_url

#: SQLSTATE classes and codes of PostgreSQL that a retry may get past: connection
#: exceptions (08), serialization failure / deadlock (40), insufficient resources (53),
#: operator intervention such as admin_shutdown or a statement timeout (57), system
#: errors (58), lock not available and object in use (55P03, 55006).
TRANSIENT_CLASSES = ("08", "40", "53", "57", "58")
TRANSIENT_CODES = ("55P03", "55006")


def sqlstate_transient(sqlstate: str | None) -> bool:
    """Whether an error with this SQLSTATE may pass on a later attempt."""
    return bool(sqlstate) and (str(sqlstate).startswith(TRANSIENT_CLASSES)
                               or sqlstate in TRANSIENT_CODES)


_PASSWORD_HINT = ("set PGPASSWORD (or a ~/.pgpass entry), or give the password in the "
                  "source's URL (egress.toml for named sources)")

#: SQLSTATE → what it means for the user (permanent: retrying sends the same login)
_REFUSED = {
    "28P01": "rejected the password",
    "28000": "does not accept this login (pg_hba.conf or the role)",
    "3D000": "has no such database",
    "42501": "does not allow this user to connect",
}


#: libpq reports a refused login as text only (no SQLSTATE reaches the client before the
#: session exists): the server's FATAL messages for the states above
_REFUSED_TEXT = (
    ("password authentication failed", "28P01"),
    ("no pg_hba.conf entry", "28000"),
    ("role \"", "28000"),  # role "x" does not exist
    ("database \"", "3D000"),  # database "x" does not exist
    ("permission denied for database", "42501"),
)


def connect_error(where: str, sqlstate: str | None, message: str) -> SourceError:
    """The error for a failed connection to ``where`` (a URL without its password)."""
    text = message.lower()
    server_said = message.rsplit("FATAL:", 1)[-1].strip()  # the server's own words
    if sqlstate is None:
        sqlstate = next((state for words, state in _REFUSED_TEXT
                         if words in text and "fatal" in text), None)
    if sqlstate in _REFUSED:
        return SourceAccessError(
            f"PostgreSQL at {where} {_REFUSED[sqlstate]} (SQLSTATE {sqlstate}): {server_said}"
            + (f"; {_PASSWORD_HINT}" if sqlstate == "28P01" else "")
        )
    if "no password supplied" in text:
        return SourceAccessError(
            f"PostgreSQL at {where} asks for a password and none was given: {_PASSWORD_HINT}")
    # a TLS set-up that cannot work (not a TLS connection lost mid-way: that is transient)
    if re.search(r"certificate|sslmode|does not support ssl|ssl negotiation|handshake", text):
        return SourceAccessError(f"TLS with PostgreSQL at {where} failed: {message}")
    if "connection refused" in text:
        reason = "connection refused (is the server running and listening there?)"
    elif "timeout" in text or "timed out" in text:
        reason = f"no answer in time ({message})"
    elif "could not translate host name" in text or "name or service not known" in text:
        reason = f"unknown host name ({message})"
    else:
        reason = message
    return SourceUnavailableError(f"cannot reach PostgreSQL at {where}: {reason}")


def libpq_url(url: str) -> str:
    """The URL libpq understands: ``postgresql+psycopg://`` → ``postgresql://``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise SourceError(
            f"not a PostgreSQL URL: {redact_url(url)!r} "
            "(expected postgresql://user:password@host:port/database)"
        )
    return "postgresql://" + rest

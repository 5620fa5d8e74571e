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
    if re.search(r"\b(ssl|tls|certificate)\b", text):
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

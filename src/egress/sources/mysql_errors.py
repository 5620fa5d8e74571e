"""MySQL / MariaDB errors in egress's exception tree: the server's error number decides
both the words and whether a worker retries (a restarting server or a deadlock may pass;
a refused password or a missing grant will not).

PyMySQL raises ``OperationalError(errno, message)`` and friends; its own failures to
reach the server carry the client error numbers 2003 (cannot connect), 2006 (gone away),
2013 (lost during a query). No message here ever holds the password: the server never
echoes it, and the caller scrubs the URL's secrets from the text anyway.
"""

from __future__ import annotations

from typing import Any

from egress.exceptions import (
    DataError,
    EgressError,
    PermissionDeniedError,
    SourceAccessError,
    SourceError,
    SourceUnavailableError,
)

#: The server refused the login or the database (permanent: retrying sends the same).
REFUSED = {
    1044: "does not let this user use the database",
    1045: "rejected the user or password",
    1049: "has no such database",
    1130: "does not accept connections from this host for this user",
    1698: "rejected the login (the user authenticates by another plugin)",
    1129: "blocks this host after too many failed connections (FLUSH HOSTS)",
}
#: Errors a later attempt may get past: the server unreachable, restarting or too busy,
#: lock waits, deadlocks, a statement interrupted or over its time limit.
TRANSIENT = frozenset({
    1040,  # too many connections
    1053,  # server shutdown in progress
    1205,  # lock wait timeout
    1213,  # deadlock
    1317,  # query interrupted
    1927,  # connection killed (MariaDB)
    1969,  # max_statement_time exceeded (MariaDB)
    3024,  # max_execution_time exceeded (MySQL)
    2002, 2003, 2005, 2006, 2013, 2055,  # client: cannot reach / lost the server
})
#: A user without the grant: SELECT or a column denied.
DENIED = frozenset({1142, 1143, 1227})
#: Values the server cannot convert or compare (bad filter values, out of range).
DATA = frozenset({1292, 1264, 1366, 1365, 1690})

PASSWORD_HINT = ("give the password in the source's URL (mysql://user:password@host/db, "
                 "egress.toml for named sources) or set MYSQL_PWD")


def errno_of(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, if it has one."""
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def message_of(exc: BaseException) -> str:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    if len(args) >= 2:
        return str(args[1])
    return str(exc) or type(exc).__name__


def connect_error(where: str, errno: int | None, message: str) -> SourceError:
    """The error for a failed connection to ``where`` (a URL without its password)."""
    if errno in REFUSED:
        hint = f"; {PASSWORD_HINT}" if errno == 1045 else ""
        return SourceAccessError(
            f"MySQL at {where} {REFUSED[errno]} (error {errno}): {message}{hint}")
    if errno == 2003 and "refused" in message.lower():
        reason = "connection refused (is the server running and listening there?)"
    elif errno == 2003 and "timed out" in message.lower():
        reason = f"no answer in time ({message})"
    elif errno in (2003, 2005) and ("name or service not known" in message.lower()
                                    or "unknown" in message.lower()):
        reason = f"unknown host name ({message})"
    else:
        reason = f"{message} (error {errno})" if errno else message
    return SourceUnavailableError(f"cannot reach MySQL at {where}: {reason}")


def read_error(where: str, what: str, errno: int | None, message: str) -> EgressError:
    """The error for a failed statement while reading ``what`` (a table or the catalog)."""
    if errno in DENIED:
        return PermissionDeniedError(
            f"permission denied reading {what}: {message}; grant it with "
            "GRANT SELECT ON <database>.<table> TO <user>")
    if errno is None or errno in TRANSIENT:
        return connect_error(where, errno, message)
    if errno in DATA:
        return DataError(f"cannot read {what}: {message} (error {errno})")
    return SourceError(f"cannot read {what}: {message} (error {errno})")

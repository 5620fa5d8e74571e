"""What an export's ``error`` says to API callers, and the detail kept for admins.

A worker's failure has two readers. The API caller (a tenant of a SaaS, say) gets a plain,
classified message — what failed and what to do — without hosts, ports, users, file paths
or driver text. The operator gets the detail: the exception's own message, credentials
masked, in the server log and in ``error_detail`` (``admin`` tokens, the CLI).

:func:`describe_failure` builds both as one :class:`ErrorText`: a ``str`` that *is* the
detail (so logs and string code paths keep working as before) and carries the public
message as ``.public``. The store records ``.public`` as ``error`` and the string itself
as ``error_detail``; a plain ``str`` (egress's own messages, e.g. the reconciler's) is both.
"""

from __future__ import annotations

from egress.exceptions import (
    ConfigError,
    DataError,
    EgressError,
    NoUsableKeyError,
    PermissionDeniedError,
    SinkError,
    SinkUnavailableError,
    SourceError,
    SourceUnavailableError,
    StoreError,
    TableNotFoundError,
)
from egress.redact import redact

_ADMIN = "an administrator can see the cause in the server log"
# (class, public message), most specific first. Messages of the classes mapped to None
# name only tables and columns the caller already knows: they are shown as they are.
_PUBLIC: tuple[tuple[type[BaseException], str | None], ...] = (
    (TableNotFoundError, None),
    (NoUsableKeyError, None),
    (SourceUnavailableError,
     "the source database could not be reached or opened; check that it is up and that "
     f"egress may connect to it, then retry the export ({_ADMIN})"),
    (PermissionDeniedError,
     "the source database's user may not read this table; grant it SELECT on the table, "
     "then retry the export"),
    (DataError,
     "the source holds a value that cannot be exported as its column's type declares; "
     f"fix or filter out the value, then retry the export ({_ADMIN})"),
    (SourceError,
     f"the source refused to read the table; retry the export, and if it fails again, "
     f"{_ADMIN}"),
    (SinkUnavailableError,
     "the destination could not be reached or was throttling; retry the export later "
     f"({_ADMIN})"),
    (SinkError, f"the destination could not be written; retry the export, and if it fails "
                f"again, {_ADMIN}"),
    (StoreError, "egress's job store could not be reached; retry the export later"),
    (ConfigError,
     "the server's configuration no longer allows this export (a source or destination "
     f"changed); retry the export, and if it fails again, {_ADMIN}"),
)
_UNEXPECTED = (f"an unexpected error stopped the export; retry the export, and if it fails "
               f"again, {_ADMIN}")


class ErrorText(str):
    """The detail of a failure (credentials masked), with the public message attached."""

    public: str

    def __new__(cls, detail: str, public: str) -> ErrorText:
        text = super().__new__(cls, detail)
        text.public = public
        return text


def describe_failure(exc: BaseException) -> ErrorText:
    """The recorded error of a task that failed with ``exc``."""
    message = str(exc) if isinstance(exc, EgressError) else f"{type(exc).__name__}: {exc}"
    detail = redact(message)
    for cls, public in _PUBLIC:
        if isinstance(exc, cls):
            return ErrorText(detail, detail if public is None else public)
    return ErrorText(detail, _UNEXPECTED)


def public_and_detail(error: str) -> tuple[str, str | None]:
    """(``error`` for API callers, ``error_detail``) of an error about to be recorded."""
    public = getattr(error, "public", None)
    if public is None:
        return error, None  # egress's own message: nothing more to tell an admin
    return public, str(error)

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
    EgressError,
    SinkError,
    SinkUnavailableError,
    SnapshotLostError,
    SourceAccessError,
    SourceError,
    SourceUnavailableError,
    StoreError,
)
from egress.redact import redact

_ADMIN = "an administrator can see the cause in the server log"
# (class, public message), most specific first; None: the error's own message, which
# names only what the request named (tables, columns, the query) — the same messages the
# API shows at once as 422s when a request is checked (docs/api.md, "Errors").
_PUBLIC: tuple[tuple[type[BaseException], str | None], ...] = (
    (SourceUnavailableError,
     "the source database could not be reached or opened; check that it is up and that "
     f"egress may connect to it, then retry the export ({_ADMIN})"),
    (SourceAccessError,
     "the source database refused egress's login, or does not exist; an administrator must "
     f"fix the source's settings ({_ADMIN})"),
    (SnapshotLostError,
     "the export's consistent snapshot was lost: the worker holding it stopped or lost its "
     "connection to the source; a snapshot export never continues on another snapshot, so "
     f"it failed: retry the export to start it over on a new snapshot ({_ADMIN})"),
    (SourceError, None),
    (ConfigError, None),
    (SinkUnavailableError,
     "the destination could not be reached or was throttling; retry the export later "
     f"({_ADMIN})"),
    (SinkError, f"the destination could not be written; retry the export, and if it fails "
                f"again, {_ADMIN}"),
    (StoreError, "egress's job store could not be reached; retry the export later"),
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
    """(``error`` for API callers, ``error_detail``) of an error about to be recorded;
    both redacted again, whoever built them (the store records nothing unmasked)."""
    public = getattr(error, "public", None)
    if public is None:
        return redact(error), None  # egress's own message: nothing more to tell an admin
    return redact(public), redact(str(error))

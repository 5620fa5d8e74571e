"""API tokens and the audit trail as the job store keeps them: pure values.

A token is shown once when it is made (``egress tokens create``) and only its SHA-256 is
stored: a token is 256 random bits, so a fast hash is enough (nothing to brute-force),
and a lookup by hash needs no per-row salt.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from egress.exceptions import ConfigError

#: Scopes a token may carry; ``admin`` implies every other one except ``worker``.
SCOPES = ("exports:read", "exports:create", "exports:cancel", "exports:query", "admin",
          "worker")
#: The scope of workers that reach the store through the API (``egress worker --api``):
#: only the internal worker routes, for every project, and nothing else. It stands alone
#: on a token, and ``admin`` does not imply it (a project's admin is not the fleet).
WORKER_SCOPE = "worker"
#: Every token starts with this, so a leaked one is easy to recognise (secret scanners).
TOKEN_PREFIX = "egr_"
_NAME = re.compile(r"^[\w .:@-]{1,128}$")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: one API token of one project."""

    project: str
    token_id: str
    scopes: frozenset[str]
    client: str | None = None

    def has(self, scope: str) -> bool:
        return scope in self.scopes or ("admin" in self.scopes and scope != WORKER_SCOPE)


def new_token() -> str:
    """A new secret token: the prefix and 32 random bytes, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_scopes(scopes: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The scopes in the canonical order; unknown ones are refused with the known list."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ConfigError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    if not scopes:
        raise ConfigError(f"give a token at least one scope; known: {', '.join(SCOPES)}")
    if WORKER_SCOPE in scopes and len(set(scopes)) > 1:
        raise ConfigError("the scope 'worker' stands alone: a worker token reaches only the "
                          "worker routes; make a separate token for the other scopes")
    return tuple(s for s in SCOPES if s in scopes)


def check_token_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"bad token name {name!r}: 1–128 letters, digits, spaces or . _ : @ -"
        )
    return name


@dataclass(frozen=True)
class TokenRecord:
    id: str
    project: str
    name: str
    #: SHA-256 (hex) of the secret token; the token itself is never stored.
    token_hash: str
    scopes: tuple[str, ...]
    created_at: float = 0.0
    last_used_at: float | None = None
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


#: What the audit log records, one entry per action taken through the API.
AUDIT_ACTIONS = ("export.create", "export.cancel", "export.retry", "export.delete",
                 "file.download", "link.create", "link.download", "rows.download",
                 "delivery.replay")


@dataclass(frozen=True)
class AuditEntry:
    """One action taken through the API: who (token), from where, on what."""

    project: str
    #: one of AUDIT_ACTIONS
    action: str
    token_id: str | None = None
    export_id: str | None = None
    client_address: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: Set by the store.
    id: int = 0
    at: float = 0.0

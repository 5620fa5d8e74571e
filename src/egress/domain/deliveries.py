"""Webhook deliveries as the job store keeps them: the outbox row, its attempts, the secrets.

Pure values: nothing here imports SQLAlchemy or an HTTP client. Times are seconds since
the epoch from the store's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

#: The events egress sends; each is written to the outbox in the transaction that ends
#: the export.
EVENT_TYPES = ("export.completed", "export.failed", "export.cancelled")


class DeliveryState(enum.StrEnum):
    #: Waiting for its next attempt (``next_attempt_at``), or being sent right now.
    PENDING = "pending"
    #: A receiver answered 2xx.
    DELIVERED = "delivered"
    #: Given up: the retry schedule ran out, or the URL can never be called.
    FAILED = "failed"


class AttemptOutcome(enum.StrEnum):
    #: The receiver answered 2xx.
    SUCCESS = "success"
    #: No 2xx: an error status (a redirect counts), a timeout, a refused connection.
    FAILURE = "failure"
    #: Not sent: the SSRF guard refused the URL or the address its name resolved to.
    REFUSED = "refused"


@dataclass(frozen=True)
class DeliveryRecord:
    #: Also the ``webhook-id`` header: the same on every attempt of this event.
    id: str
    export_id: str
    project: str
    event_type: str
    url: str
    #: ``{"type": …, "data": {…}}`` as written with the state change.
    payload: dict[str, Any]
    state: DeliveryState
    #: Attempts made so far (all rounds).
    attempts: int
    #: Due at this time; while a worker sends it, the end of that worker's lease.
    next_attempt_at: float
    last_error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: Set while a worker holds the delivery (claimed, not yet recorded).
    lease_token: str | None = None
    #: When the current retry round began (creation, or the last replay).
    round_started_at: float = 0.0
    #: Attempts made in the current round: they index the retry schedule.
    round_attempts: int = 0


@dataclass(frozen=True)
class DeliveryAttempt:
    delivery_id: str
    #: 1, 2, … in the order the attempts were made.
    attempt: int
    #: When the attempt began (store clock).
    at: float
    outcome: AttemptOutcome
    #: The receiver's HTTP status, when it answered.
    status_code: int | None
    #: Why it failed or was refused; None on success.
    error: str | None
    #: Seconds from the start of the attempt to the response (or the failure).
    duration: float
    #: The IP address connected to (the one the guard checked).
    address: str | None = None
    worker: str | None = None


@dataclass(frozen=True)
class WebhookSecret:
    id: str
    project: str
    #: 1 for the first secret of a project, +1 at every rotation; the newest signs for ever.
    generation: int
    #: ``whsec_<base64>``; never logged (kept out of the repr).
    secret: str = field(repr=False)
    created_at: float = 0.0
    #: Older secrets keep signing until this time after a rotation; None for the newest.
    expires_at: float | None = None


def completed_files(export_id: str, manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The files of a completed export for its ``export.completed`` event: what a receiver
    needs to fetch and check each one (``download_path`` is under the API's base URL)."""
    from urllib.parse import quote

    return [
        {"name": f["name"], "table": f["table"], "rows": f["rows"], "bytes": f["bytes"],
         "crc32c": f["crc32c"], "sha256": f["sha256"],
         "download_path": f"/v1/exports/{export_id}/files/{quote(f['name'], safe='')}"}
        for f in (manifest or {}).get("files", [])
    ]


def with_download_urls(payload: dict[str, Any], public_url: str) -> dict[str, Any]:
    """The payload as sent: each file also gets ``download_url``, absolute when the API's
    public base URL is configured (``api.public_url``), else the path alone."""
    files = payload.get("data", {}).get("files")
    if not files:
        return payload
    base = public_url.rstrip("/")
    data = {**payload["data"],
            "files": [{**f, "download_url": base + f["download_path"]} for f in files]}
    return {**payload, "data": data}

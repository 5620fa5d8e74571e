"""Webhooks over the API: an export's deliveries with every attempt, a replay, and the
project's signing secret (read, rotate). Scoped by the caller's project like every
route: another project's export or delivery answers 404."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from egress import manager
from egress.api.auth import audit
from egress.api.deps import PrincipalDep, SettingsDep, StoreDep, require_scope
from egress.api.errors import BODY_ERRORS, COMMON_ERRORS, NOT_FOUND, problem_doc
from egress.domain.deliveries import DeliveryAttempt, DeliveryRecord, WebhookSecret
from egress.exceptions import NotFoundError
from egress.webhooks.signing import new_secret

router = APIRouter(tags=["webhooks"], responses=COMMON_ERRORS)

#: The longest grace a rotation may give the previous secrets (30 days).
MAX_ROTATION_GRACE = 30 * 86400


class AttemptPublic(BaseModel):
    attempt: int = Field(description="1, 2, … in the order the attempts were made.")
    at: dt.datetime = Field(description="When the attempt began.")
    outcome: Literal["success", "failure", "refused"] = Field(
        description="success: 2xx; failure: another status (redirects are not followed), "
                    "a timeout or a connection error; refused: the SSRF guard refused the "
                    "URL or the address its host resolves to.")
    status_code: int | None = Field(description="The receiver's HTTP status, if it answered.")
    error: str | None = Field(description="Why it failed or was refused.")
    duration_ms: float
    address: str | None = Field(description="The IP address connected to.")


class DeliveryPublic(BaseModel):
    id: str = Field(description="Sent as the webhook-id header, the same on every attempt: "
                                "deduplicate on it.")
    export_id: str
    event_type: Literal["export.completed", "export.failed", "export.cancelled"]
    url: str
    state: Literal["pending", "delivered", "failed"] = Field(
        description="pending: waiting for its next attempt; delivered: a 2xx came back; "
                    "failed: given up (the retry schedule ran out, or the URL is refused).")
    attempts: int
    next_attempt_at: dt.datetime | None = Field(
        description="When the next attempt is due (pending only).")
    last_error: str | None
    created_at: dt.datetime
    attempt_log: list[AttemptPublic] = Field(description="Every attempt, oldest first.")


class DeliveryList(BaseModel):
    deliveries: list[DeliveryPublic]


class SecretVersion(BaseModel):
    id: str
    generation: int
    created_at: dt.datetime
    expires_at: dt.datetime | None = Field(
        description="Signs until then (rotated out); null for the newest secret.")


class WebhookSecretPublic(BaseModel):
    secret: str = Field(description="The newest signing secret (whsec_…). Verify the "
                                    "webhook-signature header with it (Standard Webhooks).")
    active: list[SecretVersion] = Field(
        description="Every secret that still signs, newest first: during a rotation each "
                    "request carries one signature per active secret.")


class RotateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    previous_expires_in: int | None = Field(
        default=None, ge=0, le=MAX_ROTATION_GRACE, strict=True,
        description="Seconds the previous secrets keep signing beside the new one (default "
                    "webhooks.rotation_grace_seconds; 0: stop at once).")


def _time(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, dt.UTC)


def _attempt_public(a: DeliveryAttempt) -> AttemptPublic:
    return AttemptPublic(attempt=a.attempt, at=_time(a.at), outcome=a.outcome.value,
                         status_code=a.status_code, error=a.error,
                         duration_ms=round(a.duration * 1000, 1), address=a.address)


def _delivery_public(d: DeliveryRecord, attempts: list[DeliveryAttempt]) -> DeliveryPublic:
    pending = d.state.value == "pending"
    return DeliveryPublic(
        id=d.id, export_id=d.export_id, event_type=d.event_type,  # type: ignore[arg-type]  # checked values
        url=d.url, state=d.state.value, attempts=d.attempts,
        next_attempt_at=_time(d.next_attempt_at) if pending else None,
        last_error=d.last_error, created_at=_time(d.created_at),
        # Attempts are read after the delivery: keep the ones its record already counts.
        attempt_log=[_attempt_public(a) for a in attempts
                     if a.delivery_id == d.id and a.attempt <= d.attempts],
    )


def _secret_public(secrets: list[WebhookSecret]) -> WebhookSecretPublic:
    return WebhookSecretPublic(
        secret=secrets[0].secret,
        active=[SecretVersion(id=s.id, generation=s.generation, created_at=_time(s.created_at),
                              expires_at=None if s.expires_at is None else _time(s.expires_at))
                for s in secrets],
    )


@router.get(
    "/v1/exports/{export_id}/deliveries",
    summary="The export's webhook deliveries, each with every attempt",
    dependencies=[Depends(require_scope("exports:read"))],
    responses=NOT_FOUND,
)
def list_deliveries(export_id: str, principal: PrincipalDep, store: StoreDep) -> DeliveryList:
    manager.get_export(store, principal.project, export_id)
    deliveries = store.delivery_list(principal.project, export_id)
    attempts = store.delivery_attempt_list(principal.project, export_id)
    return DeliveryList(deliveries=[_delivery_public(d, attempts) for d in deliveries])


@router.post(
    "/v1/exports/{export_id}/deliveries/{delivery_id}/replay",
    status_code=202,
    summary="Send a delivery again now (same webhook-id), with a fresh retry schedule",
    dependencies=[Depends(require_scope("exports:create"))],
    responses={404: problem_doc("No such export or delivery (or not in the caller's "
                                "project)")},
)
def replay_delivery(export_id: str, delivery_id: str, request: Request,
                    principal: PrincipalDep, store: StoreDep) -> DeliveryPublic:
    manager.get_export(store, principal.project, export_id)
    replayed = store.delivery_replay(principal.project, export_id, delivery_id)
    if replayed is None:
        raise NotFoundError(f"no delivery {delivery_id!r} of export {export_id!r} in project "
                            f"{principal.project!r}")
    audit(request, principal, "delivery.replay", export_id=export_id, delivery=delivery_id)
    attempts = store.delivery_attempt_list(principal.project, export_id)
    return _delivery_public(replayed, attempts)


@router.get(
    "/v1/webhook-secret",
    summary="The project's webhook signing secret (made on first use)",
    dependencies=[Depends(require_scope("admin"))],
)
def show_secret(request: Request, principal: PrincipalDep,
                store: StoreDep) -> WebhookSecretPublic:
    secrets = store.webhook_secret_ensure(principal.project, new_secret())
    audit(request, principal, "webhook_secret.read")
    return _secret_public(secrets)


@router.post(
    "/v1/webhook-secret:rotate",
    summary="Make a new signing secret; the previous ones keep signing for a grace period",
    dependencies=[Depends(require_scope("admin"))],
    responses=BODY_ERRORS,
)
def rotate_secret(request: Request, principal: PrincipalDep, store: StoreDep,
                  settings: SettingsDep, body: RotateRequest | None = None
                  ) -> WebhookSecretPublic:
    grace = (body.previous_expires_in if body is not None and body.previous_expires_in
             is not None else settings.webhooks.rotation_grace_seconds)
    secrets = store.webhook_secret_rotate(principal.project, new_secret(),
                                          previous_expire_in=grace)
    audit(request, principal, "webhook_secret.rotate", grace_seconds=grace)
    return _secret_public(secrets)

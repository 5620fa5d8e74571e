"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

Every request carries three headers:

- ``webhook-id``: the delivery's id, the same on every retry of one event (receivers
  deduplicate on it);
- ``webhook-timestamp``: seconds since the epoch when this attempt was signed;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, one
  per active secret of the project, separated by spaces, so a receiver that still
  holds the previous secret verifies during a rotation.

Secrets look like ``whsec_<base64 of 32 random bytes>``; the key is the decoded bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets as random
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from egress.exceptions import ConfigError

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(random.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_…`` secret."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError("a webhook secret must be 'whsec_' followed by base64") from exc
    if len(key) < 16:
        raise ConfigError("a webhook secret must hold at least 16 bytes")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 signature>`` of one request."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_headers(
    secrets: Sequence[str], msg_id: str, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers plus the content type, signed by every secret."""
    if not secrets:
        raise ConfigError("a webhook needs at least one signing secret")
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": " ".join(sign(s, msg_id, ts, body) for s in secrets),
    }


def event_body(payload: dict[str, Any], created_at: float) -> bytes:
    """The JSON body of an event: ``type``, ``timestamp`` (when the event happened, so
    the same on every retry) and ``data``."""
    moment = datetime.fromtimestamp(created_at, tz=UTC).isoformat().replace("+00:00", "Z")
    body = {"type": payload["type"], "timestamp": moment, "data": payload.get("data", {})}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

"""Our signatures verify with the reference implementation (the ``standardwebhooks`` package)."""

from __future__ import annotations

import base64
import json
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from egress.exceptions import ConfigError
from egress.webhooks.signing import event_body, new_secret, secret_key, webhook_headers


def test_a_signed_request_verifies_with_standardwebhooks():
    secret = new_secret()
    body = event_body({"type": "export.completed", "data": {"id": "exp_1"}}, 1_700_000_000.5)
    headers = webhook_headers([secret], "dlv_1", body)
    assert Webhook(secret).verify(body, headers) == {
        "type": "export.completed", "timestamp": "2023-11-14T22:13:20.500000Z",
        "data": {"id": "exp_1"},
    }
    assert headers["webhook-id"] == "dlv_1"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    assert headers["content-type"] == "application/json"


def test_a_tampered_body_or_another_secret_fails_verification():
    secret = new_secret()
    body = b'{"type":"export.failed","data":{}}'
    headers = webhook_headers([secret], "dlv_1", body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"failed", b"completed"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, {**headers, "webhook-id": "dlv_2"})


def test_every_active_secret_signs_and_each_verifies_alone():
    old, new = new_secret(), new_secret()
    body = b'{"type":"export.completed","data":{}}'
    headers = webhook_headers([new, old], "dlv_9", body)
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    Webhook(old).verify(body, headers)
    Webhook(new).verify(body, headers)


def test_secrets_are_whsec_base64_of_32_random_bytes():
    a, b = new_secret(), new_secret()
    assert a != b and a.startswith("whsec_")
    assert len(base64.b64decode(a.removeprefix("whsec_"))) == 32
    assert secret_key(a) == base64.b64decode(a[6:])
    with pytest.raises(ConfigError, match="base64"):
        secret_key("whsec_not*base64")
    with pytest.raises(ConfigError, match="at least"):
        secret_key("whsec_" + base64.b64encode(b"short").decode())
    with pytest.raises(ConfigError, match="at least one"):
        webhook_headers([], "dlv_1", b"{}")


def test_the_body_is_compact_json_and_the_same_for_every_attempt():
    payload = {"type": "export.failed", "data": {"id": "exp_1", "error": "é \"x\""}}
    first, again = event_body(payload, 1.0), event_body(payload, 1.0)
    assert first == again
    expected = {"type": "export.failed", "timestamp": "1970-01-01T00:00:01Z",
                "data": payload["data"]}
    assert first.decode() == json.dumps(expected, separators=(",", ":"), ensure_ascii=False)

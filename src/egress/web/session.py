"""The web page's session: a signed, expiring cookie holding a CSRF token and, once
signed in, the SHA-256 of the API token (never the token itself).

    egress_session = <base64url JSON {"d": digest | null, "c": csrf, "x": expires}>.<HMAC>

The HMAC-SHA256 key is derived from the link-signing key (api/links.py), so every API
node of an installation accepts the same sessions. The cookie is HttpOnly (page scripts
cannot read it), SameSite=Strict (other sites' pages never send it) and Secure when the
page is served over HTTPS. Every request re-checks the token behind the digest exactly as
a bearer token is checked, so a revoked token ends its sessions at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from egress.domain.access import TOKEN_PREFIX, hash_token

COOKIE = "egress_session"
#: Seconds a session lasts after sign-in (then the page asks for the token again).
SESSION_SECONDS = 8 * 3600
#: Cookies longer than this are not even decoded.
MAX_COOKIE_LENGTH = 1024
#: The form field every state-changing form carries.
CSRF_FIELD = "csrf"


@dataclass(frozen=True)
class Session:
    #: SHA-256 (hex) of the signed-in API token; None before sign-in.
    digest: str | None
    csrf: str
    expires_at: int

    @property
    def signed_in(self) -> bool:
        return self.digest is not None


def session_key(link_key: bytes) -> bytes:
    """A key of its own for sessions: a session cookie is never a valid download link."""
    return hmac.new(link_key, b"egress web session v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def new_session(token: str | None = None) -> Session:
    """A fresh session (fresh CSRF token): anonymous, or signed in with ``token``."""
    return Session(digest=None if token is None else hash_token(token),
                   csrf=secrets.token_urlsafe(32),
                   expires_at=int(time.time()) + SESSION_SECONDS)


def encode_session(key: bytes, session: Session) -> str:
    payload = _b64(json.dumps({"d": session.digest, "c": session.csrf,
                               "x": session.expires_at}, separators=(",", ":")).encode())
    return f"{payload}.{_mac(key, payload)}"


def decode_session(key: bytes, text: str | None, now: float | None = None) -> Session | None:
    """The session in a cookie if its signature is right and it has not expired."""
    if not text or len(text) > MAX_COOKIE_LENGTH or text.count(".") != 1:
        return None
    payload, signature = text.split(".")
    if not hmac.compare_digest(_mac(key, payload).encode(), signature.encode()):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        session = Session(digest=None if data["d"] is None else str(data["d"]),
                          csrf=str(data["c"]), expires_at=int(data["x"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    if session.expires_at <= (time.time() if now is None else now):
        return None
    return session


def read_session(request: Request) -> Session | None:
    return decode_session(request.app.state.web_session_key, request.cookies.get(COOKIE))


def set_session(request: Request, response: Response, session: Session) -> None:
    secure = request.url.scheme == "https" or (
        request.app.state.settings.api.public_url or "").startswith("https:")
    response.set_cookie(
        COOKIE, encode_session(request.app.state.web_session_key, session),
        max_age=max(session.expires_at - int(time.time()), 0), path="/",
        httponly=True, samesite="strict", secure=secure)


def clear_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def csrf_ok(session: Session | None, sent: str | None) -> bool:
    """The form's CSRF token matches the session's (compared in constant time)."""
    if session is None or not sent:
        return False
    return hmac.compare_digest(session.csrf.encode(), sent.encode())


def looks_like_token(text: str) -> bool:
    return 0 < len(text) <= 256 and text.startswith(TOKEN_PREFIX)

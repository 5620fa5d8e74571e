"""Signed download links: ``/v1/links/<payload>.<signature>`` works without a token.

The payload (base64url JSON) names the project, the export, the file, the expiry and the
token that made the link; the signature is HMAC-SHA256 over it with the link key. The
key comes from ``api.link_signing_key`` or is generated once into ``HOME/api-link-key``
(mode 0600). It is never logged; a link is as good as the file until it expires, so
it is shown once to its creator and never written to the audit log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from egress.config import Settings
from egress.exceptions import ConfigError
from egress.home import ensure_home

KEY_FILE = "api-link-key"
#: Link payloads longer than this are not even decoded.
MAX_LINK_LENGTH = 2048


@dataclass(frozen=True)
class Link:
    project: str
    export_id: str
    file: str
    expires_at: int
    token_id: str


def load_link_key(settings: Settings) -> bytes:
    """The link-signing key: the setting, else HOME/api-link-key (made on first use)."""
    if settings.api.link_signing_key:
        if len(settings.api.link_signing_key) < 32:
            raise ConfigError("api.link_signing_key must be at least 32 characters long")
        return settings.api.link_signing_key.encode()
    path = Path(settings.home) / KEY_FILE
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    ensure_home(settings.home)
    key = secrets.token_hex(32).encode()
    try:
        # O_EXCL: of several processes starting at once, one writes and the others read
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def public_base(settings: Settings, request_base: str) -> str:
    """Where link URLs point: ``api.public_url``, else the request's own base URL (built
    from its Host header, which any client may set: configure the setting in production)."""
    return (settings.api.public_url or request_base).rstrip("/")


def check_public_url(settings: Settings) -> None:
    url = settings.api.public_url
    if not url:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment:
        raise ConfigError(f"api.public_url must be an absolute http(s) URL such as "
                          f"https://exports.example.com (a path prefix is allowed), "
                          f"not {url!r}")


def sign_link(key: bytes, link: Link) -> str:
    payload = _b64(json.dumps(
        {"p": link.project, "e": link.export_id, "f": link.file, "x": link.expires_at,
         "t": link.token_id}, separators=(",", ":")).encode())
    return f"{payload}.{_mac(key, payload)}"


def verify_link(key: bytes, text: str) -> Link | None:
    """The link if its signature is right (expiry is checked by the caller); else None."""
    if len(text) > MAX_LINK_LENGTH or text.count(".") != 1:
        return None
    payload, signature = text.split(".")
    # bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500)
    if not hmac.compare_digest(_mac(key, payload).encode(), signature.encode()):
        return None
    try:
        data = json.loads(_unb64(payload))
        return Link(project=str(data["p"]), export_id=str(data["e"]), file=str(data["f"]),
                    expires_at=int(data["x"]), token_id=str(data["t"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None

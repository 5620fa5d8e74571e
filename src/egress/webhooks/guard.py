"""The SSRF guard: which callback URLs egress calls, and the one address it connects to.

A callback URL comes from an API caller, and the worker that calls it sits inside the
operator's network: without a guard, ``https://169.254.169.254/…`` or
``https://db.internal:5432`` would let a tenant probe (or talk to) private services.

- At create time, :func:`check_callback_url` checks the URL's shape (https unless
  ``webhooks.allow_http``, no userinfo, a host, printable ASCII) and, when the host is an
  IP address in any notation the C library accepts (``2130706433``, ``0x7f000001``,
  ``0177.0.0.1``, ``127.1``), refuses a blocked address; a public address written in such
  a notation is refused too, since parsers disagree about it.
- At delivery time, :func:`resolve_callback` checks the URL again, resolves the name and
  refuses it if ANY of its addresses is blocked. The dispatcher then connects to the
  address that was checked (pinned; the name is still sent as Host and TLS SNI and the
  certificate is verified against it), so a DNS answer that changes between the check
  and the connection (rebinding) cannot move the request.

Blocked: loopback, private (RFC 1918, fc00::/7), link-local (169.254/16, fe80::/10),
CGNAT (100.64/10), cloud metadata (169.254.169.254, fd00:ec2::254, 100.100.100.200),
multicast, unspecified, broadcast, reserved and documentation ranges, anything else
Python does not call global, and IPv6 forms that embed an IPv4 address (IPv4-mapped
``::ffff:a.b.c.d``, NAT64, 6to4, Teredo), judged by the embedded address. Loopback is
allowed only with ``webhooks.allow_loopback`` (tests and local development).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from egress.config import WebhookSettings
from egress.exceptions import ConfigError, EgressError

if TYPE_CHECKING:
    from egress.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``(host, port) -> addresses``: the system resolver by default; tests may pass their own.
Resolver = Callable[[str, int], Sequence[str]]

MAX_URL_LENGTH = 2048
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")

_METADATA = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata service",
    ipaddress.ip_address("fd00:ec2::254"): "cloud metadata service (AWS IPv6)",
    ipaddress.ip_address("100.100.100.200"): "cloud metadata service (Alibaba)",
}


def _nets(*pairs: tuple[str, str]) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network,
                                                 str]]:
    return [(ipaddress.ip_network(net), reason) for net, reason in pairs]


_LOOPBACK = _nets(("127.0.0.0/8", "loopback"), ("::1/128", "loopback"))
_BLOCKED = _nets(
    ("0.0.0.0/32", "unspecified"), ("::/128", "unspecified"),
    ("10.0.0.0/8", "private (RFC 1918)"), ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.168.0.0/16", "private (RFC 1918)"), ("fc00::/7", "private (unique local)"),
    ("169.254.0.0/16", "link-local"), ("fe80::/10", "link-local"),
    ("100.64.0.0/10", "CGNAT (shared address space)"),
    ("224.0.0.0/4", "multicast"), ("ff00::/8", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("0.0.0.0/8", "reserved ('this network')"), ("240.0.0.0/4", "reserved"),
    ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    ("192.0.2.0/24", "reserved (documentation)"), ("198.51.100.0/24", "reserved (documentation)"),
    ("203.0.113.0/24", "reserved (documentation)"), ("2001:db8::/32", "reserved (documentation)"),
    ("198.18.0.0/15", "reserved (benchmarking)"), ("fec0::/10", "site-local (deprecated)"),
    ("100::/64", "reserved (discard)"), ("64:ff9b:1::/48", "reserved (local NAT64)"),
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPAT = ipaddress.ip_network("::/96")


class Refused(ConfigError):
    """The guard refused a callback URL, or an address its host resolves to."""

    def __init__(self, reason: str, *, permanent: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        #: False when the refusal depends on DNS (the name may point elsewhere later).
        self.permanent = permanent


class ResolveError(EgressError):
    """The callback's host name could not be resolved (retry later)."""

    transient = True


@dataclass(frozen=True)
class CallbackTarget:
    """Where one delivery goes: the URL's parts and the address that passed the guard."""

    scheme: str
    #: The name as sent in Host and SNI (IDNA/ASCII, lower case), or the address text.
    host: str
    port: int
    #: Path and query, for the request line.
    target: str
    #: The checked IP address to connect to.
    address: str


def _webhook_settings(settings: Settings | WebhookSettings) -> WebhookSettings:
    return settings if isinstance(settings, WebhookSettings) else settings.webhooks


def parse_ipv4_any(host: str) -> tuple[ipaddress.IPv4Address, bool] | None:
    """An IPv4 address in any notation ``inet_aton`` accepts (1–4 parts, each decimal,
    ``0x`` hex or ``0`` octal), with whether it was written as plain dotted decimal.
    None when ``host`` is not such a number; Refused when it looks like one but is
    out of range (``256.1.1.1``, ``1.2.3.4.5``)."""
    parts = host.split(".")
    if not all(_NUMERIC_PART.match(p) for p in parts):
        return None
    if len(parts) > 4:
        raise Refused(f"host {host!r} is not a valid IPv4 address (more than four parts)")
    values = []
    for p in parts:
        if p[:2].lower() == "0x":
            values.append(int(p[2:] or "0", 16))
        elif len(p) > 1 and p.startswith("0"):
            if not set(p) <= set("01234567"):
                raise Refused(f"host {host!r} is not a valid IPv4 address (bad octal part {p!r})")
            values.append(int(p, 8))
        else:
            values.append(int(p))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise Refused(f"host {host!r} is not a valid IPv4 address (a part is out of range)")
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (5 - len(values)) + last
    canonical = len(parts) == 4 and all(p.isdigit() and str(int(p)) == p for p in parts)
    return ipaddress.IPv4Address(number), canonical


def blocked_reason(address: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why egress must not connect to ``address``; None if it may."""
    if isinstance(address, ipaddress.IPv6Address):
        form, embedded = _embedded_ipv4(address)
        for inner in embedded:
            reason = blocked_reason(inner, allow_loopback=allow_loopback)
            if reason:
                return f"{form} embedding {inner}, {reason}"
        if address.ipv4_mapped is not None:
            return None  # exactly the embedded IPv4 address, which passed
    if address in _METADATA:
        return _METADATA[address]
    for net, reason in _LOOPBACK:
        if address in net:
            return None if allow_loopback else reason
    for net, reason in _BLOCKED:
        if address in net:
            return reason
    if not address.is_global:
        return "not a public address (special-purpose range)"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]]:
    if address.ipv4_mapped is not None:
        return "IPv4-mapped IPv6 address", [address.ipv4_mapped]
    if address in _NAT64:
        return "NAT64 address", [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    if address.sixtofour is not None:
        return "6to4 address", [address.sixtofour]
    if address.teredo is not None:
        return "Teredo address", list(address.teredo)
    if address in _COMPAT and int(address) > 1:
        return "IPv4-compatible IPv6 address", [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return "", []


def _split(url: str, settings: WebhookSettings) -> tuple[str, str, int, str, IPAddress | None]:
    """(scheme, host, port, target, literal address or None), or Refused."""
    if not isinstance(url, str) or not url:
        raise Refused("callback_url must be a non-empty URL")
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"callback_url is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or not url.isprintable() or any(c in url for c in " \\"):
        raise Refused(
            "callback_url must be printable ASCII without spaces or backslashes; write "
            "international host names in punycode (xn--…) and percent-encode the path"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"callback_url is not a valid URL: {exc}") from exc
    scheme = parts.scheme.lower()
    allowed = ("https", "http") if settings.allow_http else ("https",)
    if scheme not in allowed:
        hint = "" if settings.allow_http else " (http only with webhooks.allow_http)"
        raise Refused(
            f"callback_url scheme {parts.scheme or '(none)'!r} is not allowed; "
            f"use {' or '.join(allowed)}{hint}"
        )
    if "@" in parts.netloc:
        raise Refused("callback_url must not carry a user name or password (user@host)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("callback_url has no host")
    if port == 0:
        raise Refused("callback_url port 0 is not allowed; use 1–65535")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    port = port or (443 if scheme == "https" else 80)
    if "%" in host:
        raise Refused(f"callback_url host {host!r} has a zone id or an escape; neither is allowed")
    if ":" in host:
        try:
            return scheme, host, port, target, ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise Refused(f"callback_url host {host!r} is not a valid IPv6 address") from exc
    labels = host.split(".")
    if _NUMERIC_PART.match(labels[-1]):  # ends in a number: an address, not a name
        parsed = parse_ipv4_any(host)
        if parsed is None:
            raise Refused(f"callback_url host {host!r} is neither a name nor an IPv4 address")
        address, canonical = parsed
        reason = blocked_reason(address, allow_loopback=settings.allow_loopback)
        if reason:
            raise Refused(_refusal(f"callback_url host {host!r} is {address}", reason))
        if not canonical:
            raise Refused(
                f"callback_url host {host!r} is an IPv4 address in a non-standard notation; "
                f"write it as {address}"
            )
        return scheme, host, port, target, address
    if not all(_LABEL.match(label) for label in labels) or len(host) > 253:
        raise Refused(f"callback_url host {host!r} is not a valid host name")
    if (host == "localhost" or host.endswith(".localhost")) and not settings.allow_loopback:
        raise Refused(f"callback_url host {host!r} is a loopback name")
    return scheme, host, port, target, None


def check_callback_url(url: str, settings: Settings | WebhookSettings) -> str:
    """Check a callback URL when an export is created; returns it unchanged.

    Raises ConfigError (Refused) saying what is wrong and what is allowed. Host names
    are not resolved here (they are checked again at every delivery)."""
    ws = _webhook_settings(settings)
    *_, literal = _split(url, ws)
    if literal is not None:
        reason = blocked_reason(literal, allow_loopback=ws.allow_loopback)
        if reason:
            raise Refused(_refusal(f"callback_url host [{literal}]", reason))
    return url


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolveError(f"cannot resolve {host!r}: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolve_callback(
    url: str, settings: Settings | WebhookSettings, resolver: Resolver = system_resolver
) -> CallbackTarget:
    """Check ``url`` again, resolve its host and pick the address to connect to.

    Raises Refused (with ``permanent`` False when only the DNS answer is to blame) or
    ResolveError."""
    ws = _webhook_settings(settings)
    scheme, host, port, target, literal = _split(url, ws)
    if literal is not None:
        reason = blocked_reason(literal, allow_loopback=ws.allow_loopback)
        if reason:
            raise Refused(_refusal(f"callback_url host [{literal}]", reason))
        return CallbackTarget(scheme, host, port, target, str(_connectable(literal)))
    answers = resolver(host, port)
    addresses: list[IPAddress] = []
    for text in answers:
        try:
            addresses.append(ipaddress.ip_address(str(text).split("%", 1)[0]))
        except ValueError as exc:
            raise ResolveError(f"resolver returned {text!r} for {host!r}") from exc
    if not addresses:
        raise ResolveError(f"{host!r} resolved to no address")
    for address in addresses:
        reason = blocked_reason(address, allow_loopback=ws.allow_loopback)
        if reason:
            raise Refused(_refusal(f"host {host!r} resolves to {address}", reason),
                          permanent=False)
    return CallbackTarget(scheme, host, port, target, str(_connectable(addresses[0])))


def _refusal(subject: str, reason: str) -> str:
    return f"{subject}: {reason}; webhooks may only call public addresses"


def _connectable(address: IPAddress) -> IPAddress:
    # Connect over IPv4 to an IPv4-mapped address: the checked address is the embedded one.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address

"""One webhook POST to the address the guard checked: pinned, no redirects, one deadline.

httpcore (the engine under httpx) with a network backend that ignores the URL's host
when it opens the TCP connection and connects to the checked address instead. The URL
keeps the name, so the Host header, TLS SNI and the certificate check all use the name;
only the DNS lookup is taken out of the client's hands. httpcore never follows
redirects and never reads proxy settings from the environment.

Every connect, TLS handshake, read and write gets what is left of one deadline, so a
receiver that drips its answer a byte at a time cannot hold a sender longer than
``timeout`` in all.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore

from egress.exceptions import EgressError
from egress.webhooks.guard import CallbackTarget

#: The part of a Location header kept in an attempt's error text.
MAX_LOCATION = 200


class PostError(EgressError):
    """The request did not get an HTTP answer; the message says why (never the body)."""

    transient = True


@dataclass(frozen=True)
class PostResult:
    status: int
    #: The Location header of a redirect (not followed).
    location: str | None = None


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner, self._deadline = inner, deadline

    def _left(self, error: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error("the attempt's deadline passed")
        return left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._left(httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._left(httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._left(httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left),
                               self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PinnedBackend(httpcore.NetworkBackend):
    """Opens every connection to ``address``, whatever host the URL names."""

    def __init__(self, address: str, deadline: float) -> None:
        self.address, self._deadline = address, deadline
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("the attempt's deadline passed")
        stream = self._inner.connect_tcp(self.address, port, left, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks are never sent over unix sockets")


def _host_header(target: CallbackTarget) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def post(
    target: CallbackTarget,
    headers: dict[str, str],
    body: bytes,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> PostResult:
    """POST ``body`` to ``target`` (connecting to ``target.address``); the response body
    is not read. Raises PostError when no HTTP answer came within ``timeout``."""
    deadline = time.monotonic() + timeout
    url = httpcore.URL(scheme=target.scheme.encode(), host=target.host.encode(),
                       port=target.port, target=target.target.encode())
    request_headers = [("Host", _host_header(target)), ("User-Agent", "egress-webhooks/1"),
                       *headers.items()]
    try:
        with httpcore.ConnectionPool(
            ssl_context=ssl_context or httpcore.default_ssl_context(),
            network_backend=PinnedBackend(target.address, deadline),
            max_connections=1, retries=0,
        ) as pool, pool.stream(
            "POST", url, headers=request_headers, content=body,
            extensions={"timeout": {k: timeout for k in ("connect", "read", "write", "pool")}},
        ) as response:
            location = None
            for name, value in response.headers:
                if name.lower() == b"location":
                    location = value.decode("latin-1")[:MAX_LOCATION]
            return PostResult(response.status, location)
    except httpcore.TimeoutException as exc:
        raise PostError(f"no answer within {timeout:g} s ({type(exc).__name__})") from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
            OSError) as exc:
        raise PostError(f"{type(exc).__name__}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    inner = exc.__context__ if not str(exc) and exc.__context__ is not None else exc
    text = str(inner).strip() or type(inner).__name__
    return text.splitlines()[0][:300]

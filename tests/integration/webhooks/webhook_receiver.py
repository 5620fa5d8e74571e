"""A real HTTP(S) webhook receiver on 127.0.0.1 for tests, scripted per request.

``Receiver.script`` is a list of actions, one popped per request (then ``default``):
an int status, ``("redirect", status, location)``, ``("sleep", seconds, status)``,
``("hang",)`` (hold the request until ``release`` is set), ``("drip",)`` (send the
status line a byte at a time, slowly, for ever).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    script: list[Any] = field(default_factory=list)
    default: Any = 204
    requests: list[Received] = field(default_factory=list)
    #: Set when a request arrives (for tests that act while a request is in flight).
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    sni: list[str | None] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str = "/hook", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def next_action(self) -> Any:
        return self.script.pop(0) if self.script else self.default


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        receiver = self.server.receiver
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        receiver.requests.append(Received(self.path, {k.lower(): v for k, v in
                                                       self.headers.items()}, body, time.time()))
        receiver.arrived.set()
        action = receiver.next_action()
        if isinstance(action, int):
            self._answer(action)
        elif action[0] == "redirect":
            self._answer(action[1], {"Location": action[2]})
        elif action[0] == "sleep":
            time.sleep(action[1])
            self._answer(action[2])
        elif action[0] == "hang":
            receiver.release.wait(60)
            self.close_connection = True
        elif action[0] == "drip":
            for byte in b"HTTP/1.1 200 OK\r\n" * 100:
                if receiver.release.is_set():
                    break
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.receiver.requests.append(
            Received(self.path, dict(self.headers.items()), b"", time.time()))
        self._answer(200)

    def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: Receiver

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a sender that gave up closes its end: not the test's business


@contextmanager
def running_receiver(ssl_context: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    server = _Server(("127.0.0.1", 0), _Handler)
    receiver = Receiver(server)
    server.receiver = receiver
    if ssl_context is not None:
        def sni(_sock: Any, name: str | None, _ctx: Any) -> None:
            receiver.sni.append(name)

        ssl_context.sni_callback = sni
        server.socket = ssl_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def make_certificates(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for ``name`` signed by it:
    (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "egress test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        alt = x509.DNSName(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths

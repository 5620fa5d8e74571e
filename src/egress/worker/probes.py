"""The probe server of ``egress worker``: ``/metrics``, ``/healthz`` and ``/readyz``.

A small threaded HTTP server of the standard library on a daemon thread, started by
the ``worker`` command before the worker runs and stopped after it
(``worker.metrics_port``, 9464 by default, 0: none; ``worker.metrics_host``, 127.0.0.1
by default: a container sets 0.0.0.0 so that Prometheus and the kubelet reach it).
None of the answers needs a token or says anything secret.

- ``/metrics``: the process's Prometheus metrics (``egress.metrics``), text format.
- ``/healthz``: 200 while every loop of the worker beats in time (``worker/health.py``);
  503 with a JSON body naming each stale loop and its age otherwise. For a liveness
  probe: a 503 means the process is stuck, and restarting it helps.
- ``/readyz``: 200 when the job store answers and its schema is current
  (``store.schema_current()``), 503 otherwise, as the API's ``/readyz``. Not a reason to
  restart the worker: it waits for the store on its own.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from egress.exceptions import ConfigError, StoreError
from egress.metrics import exposition
from egress.store.base import WorkerStore
from egress.worker.health import Heartbeats

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:egress:problem:"
#: Seconds a probe connection may sit idle (a client that never sends holds a thread).
REQUEST_TIMEOUT = 10.0
#: How often the serving loop looks for :meth:`ProbeServer.stop` between requests: the
#: longest a stopping worker waits for it (at 0.5 s, the default of the standard library,
#: every SIGTERM'd worker took up to half a second longer to exit). 20 idle wake-ups a
#: second cost no measurable CPU.
POLL_SECONDS = 0.05


class ProbePortError(ConfigError):
    """The probe server cannot listen where ``worker.metrics_host``/``metrics_port`` say."""


class ProbeServer:
    """Serves a worker's probes on ``host:port`` (``port`` 0: any free port) from
    :meth:`start` until :meth:`stop`. ``stale_seconds``: the bound of ``/healthz``."""

    def __init__(self, store: WorkerStore, heartbeats: Heartbeats, *, host: str, port: int,
                 stale_seconds: float) -> None:
        self.store, self.heartbeats = store, heartbeats
        self.host, self.requested_port = host, port
        self.stale_seconds = stale_seconds
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (the one chosen when ``port`` was 0)."""
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    def start(self) -> ProbeServer:
        probes = self

        class Handler(_Handler):
            server_probes = probes

        try:
            server = ThreadingHTTPServer((self.host, self.requested_port), Handler)
        except OSError as exc:
            where = f"{self.host}:{self.requested_port}"
            if exc.errno == errno.EADDRINUSE:
                reason = "the port is in use (another worker on this machine?)"
            else:
                reason = exc.strerror or str(exc)
            raise ProbePortError(
                f"cannot serve the worker's metrics and probes on {where}: {reason}; choose "
                "another with --metrics-port / worker.metrics_port "
                "(EGRESS_WORKER_METRICS_PORT), or 0 for none") from exc
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="probes",
                                        kwargs={"poll_interval": POLL_SECONDS}, daemon=True)
        self._thread.start()
        log.info("probes listening", extra={"host": self.host, "port": self.port,
                                            "paths": "/metrics /healthz /readyz"})
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    # --- the answers: (status, content type, body) ---------------------------------------

    def metrics(self) -> tuple[int, str, bytes]:
        body, content_type = exposition()
        return 200, content_type, body

    def healthz(self) -> tuple[int, str, bytes]:
        stale = self.heartbeats.stale(self.stale_seconds)
        if not stale:
            loops = {name: round(age, 3) for name, age in sorted(self.heartbeats.loops().items())}
            return _json(200, {"status": "ok", "loops": loops})
        names = ", ".join(f"{s.loop} ({s.age:.0f}s)" for s in stale)
        return _problem(503, "stale-loops", "Worker loops are stuck",
                        f"no iteration in time (worker.health_stale_seconds): {names}",
                        stale=[{"loop": s.loop, "age_seconds": round(s.age, 3),
                                "limit_seconds": round(s.limit, 3)} for s in stale])

    def readyz(self) -> tuple[int, str, bytes]:
        try:
            current = self.store.schema_current()
        except StoreError:
            return _problem(503, "not-ready", "Not ready", "the job store cannot be reached")
        except Exception as exc:  # e.g. the API of an --api worker answers oddly
            log.warning("readiness check failed", extra={"error": str(exc)})
            return _problem(503, "not-ready", "Not ready", "the job store cannot be reached")
        if not current:
            return _problem(503, "not-ready", "Not ready",
                            "the job store's schema is not current: run 'egress migrate'")
        return _json(200, {"status": "ok", "detail": None})


def _json(status: int, body: dict[str, Any], content_type: str = "application/json"
          ) -> tuple[int, str, bytes]:
    return status, content_type, json.dumps(body).encode()


def _problem(status: int, slug: str, title: str, detail: str, **extra: Any
             ) -> tuple[int, str, bytes]:
    body = {"type": TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail,
            **extra}
    return _json(status, body, PROBLEM_JSON)


class _Handler(BaseHTTPRequestHandler):
    server_probes: ProbeServer
    timeout = REQUEST_TIMEOUT
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        routes = {"/metrics": self.server_probes.metrics, "/healthz": self.server_probes.healthz,
                  "/readyz": self.server_probes.readyz}
        route = routes.get(path)
        if route is None:
            status, content_type, body = _problem(
                404, "not-found", "Not found", "the worker serves /metrics, /healthz, /readyz")
        else:
            try:
                status, content_type, body = route()
            except Exception:
                log.exception("probe failed", extra={"path": path})
                status, content_type, body = _problem(500, "internal", "Internal error",
                                                      "see the worker's log")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not worth a log line each (the API logs its own)."""

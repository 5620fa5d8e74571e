"""``egress serve``: the HTTP API with uvicorn, plus an embedded worker by default.

uvicorn's own access log is off: it prints raw paths, and the path of a signed download
link is a credential. The app logs each request by its route template instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

import click

from egress.cli.jobs import home_option, log_format_option, open_store

if TYPE_CHECKING:
    import uvicorn

    from egress.config import Settings


@click.command()
@home_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--no-worker", is_flag=True,
              help="API only: run workers elsewhere ('egress worker').")
@click.option("--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="API processes sharing the port: one Python process uses one core at "
                   "most. The embedded worker runs in the first one only.")
@click.option("--log-level", default="INFO", show_default=True)
@log_format_option
def serve(home: str | None, host: str, port: int, no_worker: bool, processes: int,
          log_level: str, log_format: str) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /openapi.json) and run an embedded worker."""
    import uvicorn

    from egress.config import load_settings
    from egress.logs import setup_logging

    setup_logging(log_level, log_format)
    settings = load_settings(home)
    # log_config=None: keep the handlers set up above (one line per event)
    config = uvicorn.Config("egress", host=host, port=port, log_config=None,
                            access_log=False, log_level=log_level.lower(), proxy_headers=True,
                            timeout_keep_alive=settings.api.keep_alive_seconds)
    if processes == 1:
        _serve(settings, config, None, run_worker=not no_worker)
        return
    sock = _listen(host, port)
    children = []
    for index in range(processes):
        pid = os.fork()  # before any store, pool or thread exists in this process
        if pid == 0:
            code = 0
            try:
                _serve(settings, config, sock, run_worker=not no_worker and index == 0)
            except BaseException:  # a child never returns into click
                logging.getLogger(__name__).exception("API process failed")
                code = 1
            finally:
                os._exit(code)
        children.append(pid)
    sock.close()
    sys.exit(_supervise(children))


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket the API processes share. Made with ``IPPROTO_TCP`` (uvicorn's
    ``bind_socket`` leaves the protocol 0): asyncio sets TCP_NODELAY only on connections
    accepted from such a socket, and without it every keep-alive answer waited ~40 ms
    for a delayed ACK."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
        flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    return sock


def _serve(settings: Settings, config: uvicorn.Config, sock: socket.socket | None, *,
           run_worker: bool) -> None:
    import gc

    from egress.api.server import Server
    from egress.web import create_site

    store = open_store(settings)
    try:
        config.app = create_site(settings, store, run_worker=run_worker)
        # Everything loaded so far lives as long as the process: keep it out of the
        # collector's full passes, which otherwise walk it on every gen-2 collection
        # (a pause that shows in the API's tail latency).
        gc.collect()
        gc.freeze()
        Server(config).run(sockets=[sock] if sock is not None else None)
    finally:
        store.close()


def _supervise(children: list[int]) -> int:
    """Pass SIGTERM and SIGINT on to the API processes and wait for them. When one ends
    by itself (a crash, a kill), the others are stopped too and the exit status is 1: a
    service manager or Kubernetes then restarts the whole server, never half of it."""
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status, running = 0, set(children)
    while running:
        pid, wait_status = os.wait()
        running.discard(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        # uvicorn ends by raising the signal it was stopped with again, once it is done
        if code not in (0, -signal.SIGTERM, -signal.SIGINT) or not stopping:
            status = 1
            if not stopping:
                logging.getLogger(__name__).error(
                    "API process %d ended by itself; stopping the others", pid)
                forward(signal.SIGTERM, None)
    return status

"""A TCP proxy on 127.0.0.1 that can go away for a while: an outage as a client sees it
(connections refused, open ones cut), in front of a real server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class OutageProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._serving = self._start_accepting()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        return listener

    def _start_accepting(self) -> threading.Thread:
        thread = threading.Thread(target=self._accept, args=(self._listener,), daemon=True)
        thread.start()
        return thread

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: an outage, or the end
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open.difference_update((src, dst))

    def _cut(self) -> None:
        self._listener.close()
        with self._lock:
            open_now = list(self._open)
        for s in open_now:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def outage(self, seconds: float) -> None:
        """Refuse and cut every connection for ``seconds``, then accept again (blocking)."""
        self._cut()
        time.sleep(seconds)
        if not self._stopped:
            self._listener = self._listen(self.port)
            self._serving = self._start_accepting()

    def close(self) -> None:
        self._stopped = True
        self._cut()

"""A throwaway MariaDB server for tests: its own data directory, a free port on 127.0.0.1.

``mariadb-install-db`` and ``mariadbd`` run as the ``mysql`` user (when root) in a
directory made with ``tempfile.mkdtemp`` and handed to that user (pytest's ``tmp_path``
is not reachable by it). ``root`` logs in from 127.0.0.1 without a password; the tests
create users with passwords where they need them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pgserver import free_port

#: How long the server may take to answer its first connection (seconds).
START_TIMEOUT = 60.0


def _binary(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError(f"{name} not found: apt-get install -y mariadb-server mariadb-client")


def _as_mysql(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "mysql", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class MariaDbServer:
    datadir: Path
    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        return self.datadir / "mysqld.sock"

    def url_for(self, database: str, user: str = "root", password: str | None = None) -> str:
        auth = f"{user}:{password}" if password is not None else user
        return f"mysql://{auth}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None) -> object:
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user="root",
                               database=database, charset="utf8mb4", autocommit=True)

    def execute(self, *statements: str, database: str | None = None) -> None:
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:  # type: ignore[attr-defined]
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()  # type: ignore[attr-defined]

    def create_database(self, name: str) -> str:
        """A fresh, empty database (dropped first if a former run left it)."""
        self.execute(f"DROP DATABASE IF EXISTS `{name}`",
                     f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        return self.url_for(name)

    def start(self) -> None:
        log = open(self.datadir / "server.log", "ab")  # noqa: SIM115 (the server's stderr)
        try:
            self.process = subprocess.Popen(_as_mysql([
                _binary("mariadbd"), "--no-defaults", f"--datadir={self.datadir / 'data'}",
                f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
                f"--pid-file={self.datadir / 'mariadbd.pid'}", "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
                "--innodb-buffer-pool-size=64M", "--skip-log-bin", "--max-connections=200",
                "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
                "--default-time-zone=+00:00", "--log-error=" + str(self.datadir / "error.log"),
            ]), stdout=log, stderr=log)
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        import pymysql

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                conn = self.connect()
            except pymysql.err.OperationalError:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"mariadbd exited: {self._log_tail()}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mariadbd did not answer: {self._log_tail()}") from None
                time.sleep(0.05)
            else:
                conn.close()  # type: ignore[attr-defined]
                return

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.datadir / "error.log").read_text(errors="replace")[-2000:]
        return "(no log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def start_server() -> MariaDbServer:
    tmp = Path(tempfile.mkdtemp(prefix="egress-mariadb-"))
    os.chmod(tmp, 0o755)
    if os.geteuid() == 0:
        shutil.chown(tmp, "mysql", "mysql")
    server = MariaDbServer(tmp, free_port())
    subprocess.run(_as_mysql([
        _binary("mariadb-install-db"), "--no-defaults", f"--datadir={tmp / 'data'}",
        "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
        "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
    ]), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server.start()
    return server


@contextlib.contextmanager
def running_server() -> Iterator[MariaDbServer]:
    server = start_server()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        shutil.rmtree(server.datadir, ignore_errors=True)

"""A throwaway PostgreSQL server for tests and benchmarks.

``initdb``/``postgres`` refuse to run as root, so when root they run as the ``postgres``
user in a directory made with ``tempfile.mkdtemp`` and handed to that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def pg_bin_dir() -> Path:
    env = os.environ.get("EGRESS_PG_BIN")
    if env:
        return Path(env)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise RuntimeError("PostgreSQL server binaries not found: apt-get install -y postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    datadir: Path
    port: int
    bindir: Path
    #: extra ``-c name=value`` server settings (benchmarks: logging, pg_stat_statements)
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        opts += "".join(f" -c {name}={shlex.quote(value)}" for name, value in self.settings)
        self._run("pg_ctl", "-D", str(self.datadir / "data"), "-w", "-l",
                  str(self.datadir / "log"), "-o", opts, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.datadir / "data"), "-w", "-m", mode, "stop")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: drops every connection, as a real restart does."""
        self.stop("fast")
        self.start()

    def create_database(self, name: str, template: str | None = None) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            tpl = f" TEMPLATE {template}" if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{tpl}')
        return self.url_for(name)


def start_server(settings: dict[str, str] | None = None) -> PgServer:
    bindir = pg_bin_dir()
    tmp = Path(tempfile.mkdtemp(prefix="egress-pg-"))
    os.chmod(tmp, 0o755)
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    server = PgServer(tmp, free_port(), bindir, tuple((settings or {}).items()))
    server._run("initdb", "-D", str(tmp / "data"), "-U", "postgres", "-A", "trust",
                "--no-sync", "-E", "UTF8", "--locale=C")
    server.start()
    return server


@contextlib.contextmanager
def running_server(settings: dict[str, str] | None = None) -> Iterator[PgServer]:
    server = start_server(settings)
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop("immediate")
        shutil.rmtree(server.datadir, ignore_errors=True)

"""A failed connection to PostgreSQL says which failure it is (against a real server that
asks for passwords): wrong password, no password, no such database, nothing listening.
The refusals are permanent (a worker does not retry them); an unreachable server is not."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from egress.cli import main
from egress.exceptions import SourceAccessError, SourceUnavailableError
from egress.failures import describe_failure
from egress.sources.postgres import PostgresSource
from pgserver import PgServer, free_port, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    # outside pytest's tmp (0700 for root): the server runs as the postgres user
    folder = Path(tempfile.mkdtemp(prefix="egress-hba-"))
    hba = folder / "pg_hba.conf"
    hba.write_text("local all all trust\n"
                   "host all reader 127.0.0.1/32 scram-sha-256\n"
                   "host all all 127.0.0.1/32 trust\n")
    hba.chmod(0o644)
    folder.chmod(0o755)
    try:
        with running_server({"hba_file": str(hba)}) as server:
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("CREATE ROLE reader LOGIN PASSWORD 'right-password'")
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _url(server: PgServer, userinfo: str, db: str = "postgres") -> str:
    return f"postgresql://{userinfo}@127.0.0.1:{server.port}/{db}"


def _error(url: str, monkeypatch: pytest.MonkeyPatch) -> Exception:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    with pytest.raises(Exception) as caught:
        PostgresSource(url).close()
    return caught.value


def test_the_right_password_connects(server: PgServer) -> None:
    PostgresSource(_url(server, "reader:right-password")).close()


def test_wrong_password(server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _error(_url(server, "reader:wrong-password"), monkeypatch)
    assert isinstance(exc, SourceAccessError) and not exc.transient
    assert "rejected the password" in str(exc) and "28P01" in str(exc)
    assert "wrong-password" not in str(exc) and "PGPASSWORD" in str(exc)


def test_missing_password(server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _error(_url(server, "reader"), monkeypatch)
    assert isinstance(exc, SourceAccessError) and not exc.transient
    assert "asks for a password and none was given" in str(exc) and "PGPASSWORD" in str(exc)


def test_missing_database(server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _error(_url(server, "postgres", db="nope_db"), monkeypatch)
    assert isinstance(exc, SourceAccessError) and not exc.transient
    assert "has no such database" in str(exc) and "3D000" in str(exc)
    # API callers get a plain message without host or database; the detail keeps both
    described = describe_failure(exc)
    assert "refused egress's login, or does not exist" in described.public
    assert "127.0.0.1" not in described.public and "nope_db" in described


def test_nothing_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _error(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", monkeypatch)
    assert isinstance(exc, SourceUnavailableError) and exc.transient
    assert "connection refused (is the server running" in str(exc)


def test_cli_names_the_cause(server: PgServer, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    result = CliRunner().invoke(main, ["export", "--source", _url(server, "reader"),
                                       "--all", "--format", "csv", "--out", str(tmp_path)])
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines() == [
        f"egress: error: PostgreSQL at {_url(server, 'reader')} asks for a password and none "
        "was given: set PGPASSWORD (or a ~/.pgpass entry), or give the password in the "
        "source's URL (egress.toml for named sources)"]

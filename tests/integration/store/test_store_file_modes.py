"""The embedded store holds webhook signing secrets and token hashes: its files are the
owner's alone (0600), whatever the umask, and so is a new home directory (0700)."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from egress.cli import main
from egress.store.sql import SqlJobStore

SUFFIXES = ("", "-wal", "-shm", "-writelock")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The common default umask (0644 files, 0755 directories)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_sqlite_store_is_readable_by_its_owner_only(tmp_path: Path, open_umask,
                                                          export_request):
    db = tmp_path / "egress.db"
    store = SqlJobStore(f"sqlite:///{db}")
    try:
        store.migrate()
        store.export_create(*export_request("p"))
        modes = {s: _mode(Path(f"{db}{s}")) for s in SUFFIXES}
    finally:
        store.close()
    assert modes == dict.fromkeys(SUFFIXES, 0o600)


def test_an_existing_store_made_with_wider_modes_is_tightened(tmp_path: Path, open_umask,
                                                              export_request, caplog):
    db = tmp_path / "egress.db"
    old = SqlJobStore(f"sqlite:///{db}")
    old.migrate()
    old.close()
    for s in SUFFIXES:  # as an older egress left them
        Path(f"{db}{s}").touch()
        os.chmod(f"{db}{s}", 0o644)
    with caplog.at_level(logging.WARNING, logger="egress"):
        store = SqlJobStore(f"sqlite:///{db}")
    try:
        store.export_create(*export_request("p"))
        assert {s: _mode(Path(f"{db}{s}")) for s in SUFFIXES} == dict.fromkeys(SUFFIXES,
                                                                                0o600)
    finally:
        store.close()
    assert str(db) in caplog.text and "0644" in caplog.text


def test_a_new_home_is_the_owners_alone(tmp_path: Path, open_umask):
    home = tmp_path / "new" / "home"
    result = CliRunner().invoke(main, ["jobs", "ls", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert _mode(home) == 0o700
    assert _mode(home / "egress.db") == 0o600


def test_an_open_home_is_reported(tmp_path: Path, open_umask, caplog):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    with caplog.at_level(logging.WARNING, logger="egress"):
        result = CliRunner().invoke(main, ["jobs", "ls", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert str(home) in caplog.text and "0755" in caplog.text and "chmod 700" in caplog.text
    assert _mode(home / "egress.db") == 0o600

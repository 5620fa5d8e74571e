"""Small real file systems for tests of disk errors: a size-limited tmpfs (ENOSPC) and a
read-only bind mount (EROFS). Mounting needs root (CI and these machines run as root);
every mount is undone when the block ends, also after a failure."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def _umount(path: Path) -> None:
    try:
        _run("umount", str(path))
    except subprocess.CalledProcessError:
        _run("umount", "-l", str(path))  # busy (a child still holds a file): detach


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``1m``) mounted on ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def resize(path: Path, size: str) -> None:
    """Give a mounted tmpfs more (or less) room, keeping its files."""
    _run("mount", "-o", f"remount,size={size}", str(path))


def read_only(path: Path) -> None:
    """Make the file system mounted on ``path`` read-only from now on."""
    _run("mount", "-o", "remount,ro", str(path))


def fill(path: Path) -> None:
    """Fill the file system holding ``path`` until a write fails with ENOSPC."""
    block = b"\0" * (64 * 1024)
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError:
                break
        while True:  # the last few bytes
            try:
                if os.write(fd, b"\0") == 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)

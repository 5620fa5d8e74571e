"""The local sink's staged copies, as tests look at them (sinks/staged.py)."""

from __future__ import annotations

from pathlib import Path


def staged_copies(root: Path, name: str) -> list[Path]:
    """Every staged copy of the file ``name`` under a local sink's ``root``."""
    return sorted((root / ".egress" / "staging").glob(f"{name.replace('/', '__')}~*"))


def staged_copy(root: Path, name: str) -> Path:
    """The one staged copy of ``name`` (a writer's, or sealed after a clean slice)."""
    [path] = staged_copies(root, name)
    return path

"""What a one-shot run creates on disk, so that a run failing before it committed
anything removes it again: the output directory (and missing parents) it made, the
``OUT/.egress`` staging area, a state directory elsewhere (S3 exports). Once a part is
committed, or a file started, everything is kept: ``--resume`` needs it."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from egress.domain.checkpoint import Checkpoint
from egress.engine.naming import STATE_DIR
from egress.sinks import is_local


def _local_root(to: str | os.PathLike[str]) -> Path:
    text = os.fspath(to)
    return Path(unquote(urlsplit(text).path) if "://" in text else text).resolve()


class Leftovers:
    def __init__(self) -> None:
        #: Directories this run made that are removed with their content.
        self.trees: list[Path] = []
        #: Directories this run made that are removed only when empty, innermost first.
        self.dirs: list[Path] = []

    @classmethod
    def before_open(cls, to: str | os.PathLike[str]) -> Leftovers:
        """Note what does not exist yet where the sink of ``to`` is about to write."""
        made = cls()
        if not is_local(to):
            return made
        root = _local_root(to)
        if not (root / STATE_DIR).exists():
            made.trees.append(root / STATE_DIR)
        path = root
        while not path.exists() and path != path.parent:
            made.dirs.append(path)
            path = path.parent
        return made

    def note_state_dir(self, directory: Path) -> None:
        """A state directory outside the output (S3 exports, ``state_dir``), if new."""
        if not directory.exists() and directory not in self.trees:
            self.trees.append(directory)

    def remove_if_unused(self, checkpoints: Iterable[dict[str, Any]]) -> None:
        """Remove what this run made, unless a task started a file or committed a part."""
        for data in checkpoints:
            cp = Checkpoint.from_json(data)
            if cp.open_file is not None or cp.files or cp.done:
                return
        for tree in self.trees:
            shutil.rmtree(tree, ignore_errors=True)
        for directory in self.dirs:
            with contextlib.suppress(OSError):  # not empty (or gone): leave it
                directory.rmdir()

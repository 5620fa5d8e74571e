"""``python tests/freezeworker.py worker …``: ``egress worker`` that stops itself (SIGSTOP)
inside the sink's ``put_part`` of part ``FREEZE_AT_PART``: after the store's fence let
the write through, before a byte of it is written — the window a check-then-write fence
leaves open (a paused VM, a swap storm). It writes its pid to ``FREEZE_MARK`` first, once,
so that the test knows where it stopped and the process that takes over does not stop."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def install(part: int, mark: Path) -> None:
    from egress.sinks.local import LocalSink
    from egress.sinks.s3 import S3Sink

    for cls in (LocalSink, S3Sink):
        original = cls.put_part

        def put_part(self: Any, name: str, state: dict[str, Any], number: int, offset: int,
                     data: bytes, _original: Any = original) -> str | None:
            if number == part and not mark.exists():
                mark.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGSTOP)
            result: str | None = _original(self, name, state, number, offset, data)
            return result

        cls.put_part = put_part  # type: ignore[method-assign]


if __name__ == "__main__":
    install(int(os.environ["FREEZE_AT_PART"]), Path(os.environ["FREEZE_MARK"]))
    from egress.cli import main

    sys.exit(main())

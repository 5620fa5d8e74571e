"""Exit codes of the ``egress`` command and how errors map to them (docs/cli.md).

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      success
1      any other egress error (e.g. a lost lease)
2      usage or configuration: bad option, unknown format, --resume mismatch…
3      the source: cannot open or reach it, unknown table, unreadable data
4      the destination: output directory not writable, a file cannot be written, the disk
       is full, over quota or read-only (files, checkpoint, manifest)
130    stopped by Ctrl-C (SIGINT); 143 stopped by SIGTERM: committed work is kept
=====  ==========================================================================
"""

from __future__ import annotations

import signal

from egress.exceptions import ConfigError, EgressError, SinkError, SourceError
from egress.redact import redact

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SOURCE = 3
EXIT_DESTINATION = 4


def exit_code_for(exc: EgressError) -> int:
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, SourceError):
        return EXIT_SOURCE
    if isinstance(exc, SinkError):
        return EXIT_DESTINATION
    return EXIT_ERROR


def exit_code_for_signal(signum: int) -> int:
    """The shell's convention: 128 + the signal number (Ctrl-C → 130, SIGTERM → 143)."""
    return 128 + int(signum)


EXIT_INTERRUPTED = exit_code_for_signal(signal.SIGINT)


def one_line(message: object) -> str:
    """A message on one line (driver errors sometimes span several), credentials masked."""
    return redact(" ".join(part.strip() for part in str(message).splitlines() if part.strip()))

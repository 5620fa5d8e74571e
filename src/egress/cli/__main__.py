"""``python -m egress.cli``: the same as the ``egress`` command."""

from egress.cli import run

run()

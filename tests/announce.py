"""A line in the test log when a session-wide server starts (the log is otherwise dots)."""

from __future__ import annotations

import pytest


def announce(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)

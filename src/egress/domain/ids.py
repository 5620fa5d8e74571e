"""Identifiers that sort by creation time (milliseconds, then randomness), like UUIDv7."""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    """``exp_0190a3f2c1b47c1e9a2f0d3b5e`` style: prefix, 12 hex digits of ms, 14 random."""
    return f"{prefix}_{int(time.time() * 1000):012x}{secrets.token_hex(7)}"

"""``HEAD`` lets a current store be recognised without importing Alembic: it must name
the newest revision in ``versions/``."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from egress.store.migrations import HEAD, HERE


def test_head_names_the_newest_revision():
    heads = ScriptDirectory(str(HERE)).get_heads()
    assert heads == [HEAD], (
        f"egress.store.migrations.HEAD is {HEAD!r} but the newest revision is {heads}: "
        "a new revision updates HEAD too")

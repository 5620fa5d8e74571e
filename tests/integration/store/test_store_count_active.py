"""export_count_active by project and with a limit (the API's per-project cap check)."""

from __future__ import annotations

from egress.store.sql import SqlJobStore


def test_count_active_by_project_and_up_to_a_limit(store: SqlJobStore, make_export):
    p = [make_export("p")[0] for _ in range(4)]
    make_export("q")
    store.export_cancel("p", p[0].id)
    assert store.export_count_active() == 4  # three in p, one in q
    assert store.export_count_active("p") == 3
    assert store.export_count_active("q") == 1
    assert store.export_count_active("nobody") == 0
    assert store.export_count_active("p", limit=2) == 2  # counting stops at the cap
    assert store.export_count_active("p", limit=10) == 3
    assert store.export_count_active(limit=1) == 1

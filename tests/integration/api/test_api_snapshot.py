"""``snapshot`` in ``POST /v1/exports``: a boolean, refused for a source whose workers
cannot share one snapshot (the API's test source is SQLite)."""

from __future__ import annotations

from apiharness import Api, assert_problem


def test_snapshot_is_a_boolean_and_needs_a_postgresql_source(api: Api):
    refused = assert_problem(api.post("/v1/exports", json={
        "source": "main", "tables": ["events"], "snapshot": True}), 422,
        "needs a PostgreSQL source")
    assert "egress export --snapshot" in refused["detail"]
    assert_problem(api.post("/v1/exports", json={
        "source": "main", "tables": ["events"], "snapshot": "yes"}), 422)
    plain = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                          "snapshot": False})
    assert plain.status_code == 202, plain.text

"""Bad request bodies get clear errors and create nothing: unparseable JSON is a 400,
text that is not valid Unicode a 422, loose types are not converted, and filter values
beyond their column's range are refused at create time."""

from __future__ import annotations

import pytest

from apiharness import Api, assert_problem
from egress.store.sql import SqlJobStore


def test_unparseable_json_is_a_400(api: Api, store: SqlJobStore) -> None:
    for body in (b'{"source": "main", "tables": ["events"]', b"{'source': 'main'}", b"\xff\xfe"):
        r = api.post("/v1/exports", content=body, headers={"Content-Type": "application/json"})
        problem = assert_problem(r, 400, "not valid JSON")
        assert problem["type"] == "urn:egress:problem:bad-request"
    assert api.get("/v1/exports").json()["items"] == []


def test_a_lone_surrogate_is_a_422_not_a_500(api: Api, store: SqlJobStore) -> None:
    # JSON's "\\ud800" escape decodes to a lone surrogate: not text anything can encode
    raw = ('{"source": "main", "tables": [{"name": "events", "filters": '
           '[{"column": "kind", "op": "=", "value": "a\\ud800b"}]}]}')
    r = api.post("/v1/exports", content=raw.encode(),
                 headers={"Content-Type": "application/json"})
    assert_problem(r, 422, "lone surrogate (U+D800)")
    named = api.post("/v1/exports", content=b'{"source": "\\udfff", "tables": ["events"]}',
                     headers={"Content-Type": "application/json"})
    assert_problem(named, 422, "body.source holds a lone surrogate")
    assert api.get("/v1/exports").json()["items"] == []


@pytest.mark.parametrize(("field", "value"), [
    ("max_file_size", True),
    ("max_file_size", "1000"),
    ("all", "yes"),
    ("all", 1),
    ("format", 1),
])
def test_no_loose_type_conversion(api: Api, field: str, value: object) -> None:
    body = {"source": "main", "tables": ["events"], field: value}
    if field == "all":
        body.pop("tables")
    assert_problem(api.post("/v1/exports", json=body), 422, field)


def test_filter_values_beyond_the_column_type_are_refused_at_create(api: Api) -> None:
    body = {"source": "main", "tables": [{"name": "events", "filters": [
        {"column": "id", "op": ">", "value": 2**63}]}]}
    assert_problem(api.post("/v1/exports", json=body), 422, "'id'", "out of range",
                   "9,223,372,036,854,775,807")
    estimate = api.post("/v1/exports:estimate", json=body)
    assert_problem(estimate, 422, "out of range")
    assert api.get("/v1/exports").json()["items"] == []

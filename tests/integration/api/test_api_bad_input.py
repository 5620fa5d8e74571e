"""Bad request bodies (issue #9, items 8–11): a body that is not JSON answers 400, a
lone surrogate and an out-of-range filter value 422, and the request models are strict
(no "yes" for true, no true for 1). Nothing is created by any of them. And a timestamp
filter in the documented form, end to end (item 14)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

import pytest

from apiharness import Api, assert_problem


@pytest.fixture
def store_url(sqlite_store_url: str) -> str:
    # the subject is the HTTP layer: one store kind is enough
    return sqlite_store_url


def _post_raw(api: Api, body: bytes) -> Any:
    return api.post("/v1/exports", content=body, headers={"Content-Type": "application/json"})


def _table(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"source": "main", "tables": [{"name": "events", "filters": list(filters)}]}


def test_unparseable_bodies_are_400_problems(api: Api):
    for body, words in [
        (b"{not json", "Expecting property name"),
        (b'{"source": "main", "tables": ["events"]', "at character"),
        (b'{"source": "main"} trailing', "Extra data"),
        (b"\xff\xfe\xfd", "UTF-8"),
    ]:
        problem = assert_problem(_post_raw(api, body), 400, *words.split("|"))
        assert problem["type"] == "urn:egress:problem:bad-request"
        assert "not json" not in problem["detail"] and "trailing" not in problem["detail"]
    # the same on another route with a body
    export = api.create()
    r = api.post(f"/v1/exports/{export['id']}/links", content=b"{",
                 headers={"Content-Type": "application/json"})
    assert_problem(r, 400, "not valid JSON")
    # valid JSON of the wrong shape stays a 422 validation error
    assert_problem(_post_raw(api, b"[1, 2]"), 422, "does not match the API schema")
    assert [e["id"] for e in api.get("/v1/exports").json()["items"]] == [export["id"]]


def test_lone_surrogates_are_422_not_500(api: Api):
    bodies = [
        # as the JSON escape a client sends: json.dumps writes "\ud800" for it
        _table({"column": "kind", "op": "=", "value": "\ud800"}),
        _table({"column": "kind", "op": "in", "value": ["ok", "\udfff"]}),
        {"source": "main", "tables": ["ev\ud800ents"]},
        {"source": "main\udc80", "tables": ["events"]},
        {"source": "main", "query": "SELECT '\ud800' AS id", "key": ["id"]},
    ]
    for body in bodies:
        raw = json.dumps(body).encode()
        assert b"\\ud" in raw  # the escape itself travels, as valid JSON text
        problem = assert_problem(_post_raw(api, raw), 422)
        # pydantic's own check of plain strings, or egress's of values and lists
        assert "unicode" in problem["detail"].lower(), problem
        assert problem["errors"]
    assert api.get("/v1/exports").json()["items"] == []


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("max_file_size", True, "valid integer"),
    ("max_file_size", "1000", "valid integer"),
    ("max_file_size", 1000.0, "valid integer"),
    ("all", "yes", "valid boolean"),
    ("all", 1, "valid boolean"),
    ("format", 1, "csv"),
    ("destination", 7, "valid string"),
    ("callback_url", ["https://example.com"], "valid string"),
])
def test_request_fields_are_strictly_typed(api: Api, field: str, value: Any, expected: str):
    body: dict[str, Any] = {"source": "main", "tables": ["events"], field: value}
    if field == "all":
        del body["tables"]
    problem = assert_problem(api.post("/v1/exports", json=body), 422, expected)
    assert any(field in e["loc"] for e in problem["errors"]), problem
    assert api.get("/v1/exports").json()["items"] == []


def test_strict_types_keep_the_documented_forms(api: Api):
    api.create({"source": "main", "tables": ["events"], "max_file_size": 1000})
    api.create({"source": "main", "all": True})
    export = api.create({"source": "main", "tables": [{"name": "events", "filters": [
        {"column": "amount", "op": ">=", "value": 1.5},
        {"column": "amount", "op": "<", "value": "900.25"},
        {"column": "flag", "op": "=", "value": True},
        {"column": "id", "op": "in", "value": [1, 2, 3]}]}]})
    link = api.post(f"/v1/exports/{export['id']}/links",
                    json={"file": "events.csv", "expires_in": "60"})
    assert_problem(link, 422, "valid integer")
    # a filter value keeps its JSON type: "1" is a string, not the integer 1
    assert_problem(api.post("/v1/exports", json=_table(
        {"column": "id", "op": "=", "value": "1"})), 422, "is not an integer")
    assert_problem(api.post("/v1/exports", json=_table(
        {"column": "flag", "op": "=", "value": "yes"})), 422, "true or false")


@pytest.mark.parametrize(("value", "words"), [
    (2**63, "from -9223372036854775808 to 9223372036854775807"),
    (-(2**63) - 1, "out of range"),
    (10**30, "out of range"),
])
def test_integer_filter_values_beyond_the_column_are_422(api: Api, value: int, words: str):
    for op_value in (value, [1, value]):
        op = "in" if isinstance(op_value, list) else ">="
        problem = assert_problem(api.post("/v1/exports", json=_table(
            {"column": "user_id", "op": op, "value": op_value})), 422, "'user_id'", words)
        assert str(value) in problem["detail"]
    # the largest value the column holds is fine
    api.create(_table({"column": "user_id", "op": "<=", "value": 2**63 - 1}))


def test_timestamp_filter_in_the_documented_form_exports_the_right_rows(make_api):
    """Issue #9 item 14 end to end: events.created_at is stored as '2023-11-14 22:13:21'
    (SQLite text, UTC); the filter is written as docs/api.md shows it, with a T and a Z."""
    api = make_api(run_worker=True, max_active_exports=5)
    start = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)  # created_at of id 0
    since = start + dt.timedelta(seconds=1500)
    until = (start + dt.timedelta(seconds=2200)).astimezone(
        dt.timezone(dt.timedelta(hours=-8)))
    export_id = api.create({"source": "main", "format": "csv", "tables": [
        {"name": "events", "columns": ["id", "created_at"], "filters": [
            {"column": "created_at", "op": ">=", "value": since.isoformat().replace(
                "+00:00", "Z")},
            {"column": "created_at", "op": "<", "value": until.isoformat()}]}]})["id"]
    view = api.wait(export_id)
    (events,) = view["files"]
    rows = list(csv.reader(io.StringIO(api.get(events["download_url"]).text)))[1:]
    assert [int(r[0]) for r in rows] == list(range(1500, 2200))
    assert view["rows"] == 700

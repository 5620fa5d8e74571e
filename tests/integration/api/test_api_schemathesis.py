"""schemathesis against ``/openapi.json`` of a real server: no 500, and every response
matches the published schema (status codes, content types, headers, bodies).

Bounded and deterministic: 20 examples per operation, derandomized, no example database
(a run does not depend on earlier ones). The check ``positive_data_acceptance`` is left
out on purpose: a body of the right shape can still name a source, table or column that
does not exist, which the API refuses with 422 (a documented answer that says what is
allowed). A 413 for a body above ``api.max_body_bytes`` counts as a rejection.

schemathesis's lazy ``from_fixture`` loader fails under pytest 9 (it sets
``node._nodeid``), so the document is read at collection from an app built without any
I/O, and each operation's cases are sent to a live server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from apiharness import LINK_KEY, LiveServer, Tokens, auth, make_settings
from egress.api.app import create_app
from egress.config import ApiSettings, Settings
from egress.store.sql import SqlJobStore


@pytest.fixture
def live_url(sqlite_store_url: str, tmp_path, source_db) -> Iterator[tuple[str, str]]:
    s = make_settings(tmp_path / "home", sqlite_store_url, source_db,
                      rate_limit_per_second=100_000.0, rate_limit_burst=100_000,
                      max_active_exports=10_000)
    store = SqlJobStore(sqlite_store_url)
    token = Tokens(store).make("alpha", "admin")
    try:
        with LiveServer(create_app(s, store)) as server:
            yield server.url, token
    finally:
        store.close()


def _published_schema() -> schemathesis.BaseSchema:
    """The app's OpenAPI document, read at collection without any I/O (it does not
    depend on the store or the sources); the tests run against a live server."""
    app = create_app(Settings(home=Path("/nonexistent"), store_url="sqlite:////nonexistent",
                              api=ApiSettings(link_signing_key=LINK_KEY)))
    loaded = schemathesis.openapi.from_dict(app.openapi())
    checks = loaded.config.checks
    checks.update(excluded_check_names=["positive_data_acceptance"])
    # a body above api.max_body_bytes is rejected before it is read: 413 is a rejection
    checks.negative_data_rejection.expected_statuses = [
        *checks.negative_data_rejection.expected_statuses, "413"]
    return loaded


schema = _published_schema()
#: URLs longer than this are checked only for their refusal (see the test)
MAX_URL = 8 * 1024


@schema.parametrize()
@settings(max_examples=20, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: schemathesis.Case, live_url: tuple[str, str]):
    url, token = live_url
    if case.query:
        # A query parameter whose generated value is an empty list or object is sent as
        # nothing at all (``?before=a_0`` for ``{"before": "a_0", "x": []}``): a negative
        # case made of an unknown parameter would reach the server as a valid request
        # (a flaky "schema-violating request accepted"). Sent as ``x=`` it stays unknown,
        # and the API must still refuse it.
        case.query = {k: ("" if v in ([], {}) else v) for k, v in case.query.items()}
        # A request line longer than the HTTP server reads (uvicorn: about 64 KiB of
        # generated query) may be refused by the server before the app, in plain text:
        # such requests are checked for a refusal, not for the app's documented answer.
        sent = httpx.URL(url + case.formatted_path, params=case.query)
        if len(str(sent)) > MAX_URL:
            response = case.call(base_url=url, headers=auth(token), timeout=20)
            assert 400 <= response.status_code < 500, response.text
            return
    case.call_and_validate(base_url=url, headers=auth(token), timeout=20)


def test_the_schema_covers_the_api(live_url: tuple[str, str]):
    url, _ = live_url
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert len([m for ops in paths.values() for m in ops]) >= 15

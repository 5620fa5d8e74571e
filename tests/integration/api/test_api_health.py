"""Health, readiness, metrics, the OpenAPI document, and errors of the HTTP layer."""

from __future__ import annotations

import sqlalchemy as sa

from apiharness import Api, assert_problem
from egress.store.migrations import VERSION_TABLE
from egress.store.sql import SqlJobStore


def test_health_and_readiness(api: Api, store: SqlJobStore):
    assert api.client.get("/healthz").json() == {"status": "ok", "detail": None}
    assert api.client.get("/readyz").json() == {"status": "ok", "detail": None}
    # a store migrated to an older revision is not ready
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0001'"))
    assert_problem(api.client.get("/readyz"), 503, "egress migrate")


def test_metrics_count_requests_by_route_template(api: Api):
    api.get("/v1/exports/exp_nope")
    text = api.client.get("/metrics").text
    assert 'egress_api_requests_total{method="GET",route="/v1/exports/{export_id}",' \
           'status="404"}' in text
    assert "exp_nope" not in text


def test_openapi_document(api: Api):
    doc = api.client.get("/openapi.json").json()
    assert doc["info"]["title"] == "egress"
    create = doc["paths"]["/v1/exports"]["post"]
    assert set(create["responses"]) >= {"200", "202", "401", "403", "409", "413", "422", "429"}
    assert "application/problem+json" in create["responses"]["422"]["content"]
    assert create["security"] == [{"bearer": []}]
    assert "security" not in doc["paths"]["/v1/links/{link}"]["get"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_errors_of_the_http_layer_are_problems(api: Api):
    assert_problem(api.get("/v2/whatever"), 404, "/openapi.json")
    assert_problem(api.request("PUT", "/v1/exports"), 405, "PUT")


def test_docs_page_works_offline(api: Api):
    """/docs names no other host: its script, style sheet and icon come from this server."""
    import re

    page = api.client.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    scripts = re.findall(r"""url: ?["']([^"']+)["']""", page.text)
    assert assets and all(a.startswith("/") for a in assets + scripts), assets + scripts
    for asset in assets:
        fetched = api.client.get(asset)
        assert fetched.status_code == 200 and len(fetched.content) > 1000, asset
    assert "cdn" not in page.text.lower()
    # / is the web page's sign-in form now; it links to the docs
    root = api.client.get("/", follow_redirects=False)
    assert root.status_code == 200 and 'name="token"' in root.text and 'href="/docs"' in root.text

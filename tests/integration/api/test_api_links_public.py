"""Signed links: malformed links are 404s without a traceback, and link URLs are built on
``api.public_url`` (the request's Host header only when it is unset)."""

from __future__ import annotations

import logging

import httpx
import pytest

from apiharness import Api, assert_problem


@pytest.fixture
def done(api_worker: Api) -> tuple[Api, dict]:
    export_id = api_worker.create({"source": "main", "tables": ["users"]})["id"]
    return api_worker, api_worker.wait(export_id)


@pytest.mark.parametrize("link", ["é", "ü.x", "%C3%A9.%E2%82%AC", "abc.d%C3%A9f", "a.b.c", "a.b"])
def test_malformed_link_is_a_404_without_a_traceback(api: Api, link: str,
                                                     caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.DEBUG), httpx.Client(base_url=api.client.base_url) as anon:
        assert_problem(anon.get(f"/v1/links/{link}"), 404, "no such download link")
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


def test_link_url_uses_the_configured_public_url(make_api, store, tokens):
    api = make_api(run_worker=True, public_url="https://exports.example.com/base/")
    export_id = api.create({"source": "main", "tables": ["users"]})["id"]
    api.wait(export_id)
    # a forged Host header does not choose where the link points
    r = api.post(f"/v1/exports/{export_id}/links", json={"file": "users.csv"},
                 headers={"Host": "evil.example.net"})
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    assert url.startswith("https://exports.example.com/base/v1/links/"), url
    # the link itself works once the prefix is the server's own
    signed = url.rsplit("/", 1)[1]
    assert api.client.get(f"/v1/links/{signed}").status_code == 200


def test_link_url_falls_back_to_the_request_without_public_url(done):
    api, view = done
    r = api.post(f"/v1/exports/{view['id']}/links", json={"file": "users.csv"})
    assert r.status_code == 201 and r.json()["url"].startswith(str(api.client.base_url))


def test_public_url_must_be_an_absolute_http_url(make_api):
    from egress.exceptions import ConfigError

    for bad in ("exports.example.com", "ftp://x.example.com", "https://"):
        with pytest.raises(ConfigError, match=r"api\.public_url"):
            make_api(public_url=bad)

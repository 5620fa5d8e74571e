"""Downloads: local files with Range and Content-Disposition, S3 by a 302 to a presigned
URL, and signed links that work without a token until they expire."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import httpx
import pytest

from apiharness import Api, LiveServer, Tokens, assert_problem
from egress.api.app import create_app
from egress.api.links import Link, sign_link
from egress.store.sql import SqlJobStore


@pytest.fixture
def done(api_worker: Api) -> tuple[Api, dict]:
    export_id = api_worker.create({"source": "main", "tables": ["events", "users"],
                                   "format": "jsonl", "compression": "gzip"})["id"]
    return api_worker, api_worker.wait(export_id)


def test_download_whole_file_and_ranges(done, store: SqlJobStore):
    api, view = done
    f = next(f for f in view["files"] if f["table"] == "events")
    assert f["download_url"] == f"/v1/exports/{view['id']}/files/events.jsonl.gz"
    r = api.get(f["download_url"])
    assert r.status_code == 200 and r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-type"] == "application/gzip"
    assert r.headers["content-disposition"] == 'attachment; filename="events.jsonl.gz"'
    assert len(r.content) == f["bytes"] and hashlib.sha256(r.content).hexdigest() == f["sha256"]
    part = api.get(f["download_url"], headers={"Range": "bytes=10-99"})
    assert part.status_code == 206
    assert part.headers["content-range"] == f"bytes 10-99/{f['bytes']}"
    assert part.content == r.content[10:100]
    tail = api.get(f["download_url"], headers={"Range": "bytes=-25"})
    assert tail.status_code == 206 and tail.content == r.content[-25:]
    beyond = api.get(f["download_url"], headers={"Range": f"bytes={f['bytes'] + 5}-"})
    assert beyond.status_code == 416
    manifest = api.get(f"/v1/exports/{view['id']}/files/manifest.json")
    assert manifest.status_code == 200 and manifest.json()["total_rows"] == 2540
    actions = [(e.action, e.details.get("range")) for e in store.audit_list(
        "alpha", export_id=view["id"])]
    assert ("file.download", "bytes=10-99") in actions
    assert actions.count(("file.download", None)) == 2


def test_only_listed_files_can_be_downloaded(done):
    api, view = done
    base = f"/v1/exports/{view['id']}/files"
    for name in ("../../egress.db", "..%2F..%2Fapi-link-key", "_SUCCESS", ".egress/staging",
                 "nope.csv"):
        r = api.get(f"{base}/{name}")
        assert r.status_code == 404, (name, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert_problem(api.get(f"{base}/nope.csv"), 404, "events.jsonl.gz")


def changed(text: str) -> str:
    """``text`` with its last character replaced by another one."""
    return text[:-1] + ("B" if text[-1] == "A" else "A")


def test_signed_link_works_without_a_token_until_it_expires(done, store: SqlJobStore,
                                                            tokens: Tokens):
    api, view = done
    r = api.post(f"/v1/exports/{view['id']}/links",
                 json={"file": "users.jsonl.gz", "expires_in": 60})
    assert r.status_code == 201, r.text
    link = r.json()
    assert link["file"] == "users.jsonl.gz" and link["url"].startswith(str(api.client.base_url))
    with httpx.Client() as anonymous:
        got = anonymous.get(link["url"])
        assert got.status_code == 200
        assert got.content == api.get(f"/v1/exports/{view['id']}/files/users.jsonl.gz").content
        ranged = anonymous.get(link["url"], headers={"Range": "bytes=0-9"})
        assert ranged.status_code == 206 and len(ranged.content) == 10
        # tampering with the payload or the signature: no such link
        payload, signature = link["url"].rsplit("/", 1)[1].split(".")
        base = link["url"].rsplit("/", 1)[0]
        # (one character changed for sure: "…AA" happened to be the signature 1 run in ~1000)
        assert_problem(anonymous.get(f"{base}/{payload}.{changed(signature)}"), 404)
        assert_problem(anonymous.get(f"{base}/{changed(payload)}.{signature}"), 404)
        # an expired link (signed with the server's key) is gone
        key = api.app.state.link_key
        expired = sign_link(key, Link("alpha", view["id"], "users.jsonl.gz",
                                      int(time.time()) - 1, tokens.ids[api.token]))
        assert_problem(anonymous.get(f"{base}/{expired}"), 410, "expired")
        # a link of another project's export answers like a missing one
        foreign = sign_link(key, Link("beta", view["id"], "users.jsonl.gz",
                                      int(time.time()) + 60, tokens.ids[tokens["beta"]]))
        assert_problem(anonymous.get(f"{base}/{foreign}"), 404)
        actions = [e.action for e in store.audit_list("alpha", export_id=view["id"])]
        assert actions.count("link.download") == 2 and "link.create" in actions
        # revoking the token that made the link ends the link
        store.token_revoke(tokens.ids[api.token])
        assert_problem(anonymous.get(link["url"]), 404, "revoked")


def test_link_lifetime_is_bounded(done):
    api, view = done
    url = f"/v1/exports/{view['id']}/links"
    assert_problem(api.post(url, json={"file": "users.jsonl.gz", "expires_in": 10**9}), 422)
    assert_problem(api.post(url, json={"file": "nope"}), 404, "users.jsonl.gz")
    r = api.post(url, json={"file": "users.jsonl.gz"})
    assert r.status_code == 201


def test_s3_download_redirects_to_a_fresh_presigned_url(s3, settings, store: SqlJobStore,
                                                        tokens: Tokens):
    lake = {"type": "s3", "bucket": s3.name, "prefix": "egress", "min_part_bytes": 1024}
    s = replace(settings, destinations={**settings.destinations, "lake": lake})
    with LiveServer(create_app(s, store, run_worker=True)) as server, \
            httpx.Client(base_url=server.url) as client:
        api = Api(client, tokens["alpha"])
        export_id = api.create({"source": "main", "tables": ["events"], "format": "csv",
                                "destination": "lake"})["id"]
        view = api.wait(export_id)
        [f] = view["files"]
        assert len(f["sha256"]) == 64 and len(f["crc32c"]) == 8
        r = api.get(f["download_url"])
        assert r.status_code == 302 and r.headers["cache-control"] == "no-store"
        location = r.headers["location"]
        assert location.startswith(s3.server.endpoint) and "X-Amz-Signature=" in location
        assert "X-Amz-Expires=300" in location
        body = httpx.get(location).content
        assert len(body) == f["bytes"] and body.startswith(b"id,user_id,kind")
        assert hashlib.sha256(body).hexdigest() == f["sha256"]  # through the worker too
        # each request signs anew (a link that expired is never handed out again)
        time.sleep(1.1)
        assert api.get(f["download_url"]).headers["location"] != location
        link = api.post(f"/v1/exports/{export_id}/links", json={"file": f["name"]}).json()
        follow = httpx.get(link["url"])
        assert follow.status_code == 302 and "X-Amz-Signature=" in follow.headers["location"]

"""``GET /v1/audit``: the audit log read back, for admins, within their project, paged
and filtered; and ``egress audit ls`` reading the same entries."""

from __future__ import annotations

import json

from click.testing import CliRunner

from apiharness import Api, Tokens, assert_problem
from egress.cli import main
from egress.config import Settings


def test_audit_lists_the_projects_actions_newest_first(api: Api, tokens: Tokens) -> None:
    creator = tokens["exports:create"]
    first = api.create(token=creator)
    second = api.create(token=creator)
    assert api.post(f"/v1/exports/{first['id']}/cancel").status_code == 200
    beta = api.create(token=tokens["beta"])

    page = api.get("/v1/audit").json()
    actions = [(e["action"], e["export_id"]) for e in page["items"]]
    assert actions == [("export.cancel", first["id"]), ("export.create", second["id"]),
                       ("export.create", first["id"])]  # beta's entry is not alpha's
    assert beta["id"] not in json.dumps(page)
    create = page["items"][1]
    assert create["token_id"] == tokens.ids[creator] and create["at"].endswith("Z")
    assert create["client_address"] == "127.0.0.1" and page["next_before"] is None

    only = api.get("/v1/audit", params={"action": "export.cancel"}).json()["items"]
    assert [e["export_id"] for e in only] == [first["id"]]
    of_one = api.get("/v1/audit", params={"export_id": first["id"]}).json()["items"]
    assert [e["action"] for e in of_one] == ["export.cancel", "export.create"]

    one = api.get("/v1/audit", params={"limit": 1}).json()
    older = api.get("/v1/audit", params={"limit": 2, "before": one["next_before"]}).json()
    assert [e["id"] for e in one["items"] + older["items"]] == [e["id"] for e in page["items"]]
    assert older["next_before"] is not None  # a full page: there may be more

    # the export names the token that created it too
    assert api.get(f"/v1/exports/{first['id']}").json()["created_by"] == tokens.ids[creator]
    assert api.get("/v1/exports").json()["items"][0]["created_by"] == tokens.ids[creator]

    assert_problem(api.get("/v1/audit", token=tokens["exports:read"]), 403, "admin")
    assert_problem(api.get("/v1/audit", params={"action": "export.explode"}), 422)


def test_cli_audit_ls(api: Api, tokens: Tokens, settings: Settings) -> None:
    made = api.create(token=tokens["exports:create"])
    runner = CliRunner()
    env = {"EGRESS_STORE_URL": settings.store_url}
    listed = runner.invoke(main, ["audit", "ls", "--home", str(settings.home), "--project",
                                  "alpha", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.stdout)
    assert entry["action"] == "export.create" and entry["export_id"] == made["id"]
    text = runner.invoke(main, ["audit", "ls", "--home", str(settings.home), "--project",
                                "alpha", "--action", "export.create"], env=env)
    assert text.exit_code == 0 and made["id"] in text.stdout and "export.create" in text.stdout
    other = runner.invoke(main, ["audit", "ls", "--home", str(settings.home), "--project",
                                 "beta", "--json"], env=env)
    assert json.loads(other.stdout) == []

"""``split`` in ``POST /v1/exports``: N or auto, refused with words that say what is
allowed; GET /v1/exports/{id} lists the ranges a worker planned, in key order."""

from __future__ import annotations

from apiharness import Api, assert_problem


def test_split_is_planned_by_a_worker_and_shown_in_key_order(api_worker: Api):
    r = api_worker.post("/v1/exports", json={"source": "main", "tables": ["events", "users"],
                                             "split": 3, "split_files": True})
    assert r.status_code == 202, r.text
    # the request only checks: the first worker to claim a table plans its ranges
    created = [t for t in r.json()["tables"] if t["name"] == "events"]
    assert [t["key_range"] for t in created] == [None]
    view = api_worker.wait(r.json()["id"], "completed")
    events = [t for t in view["tables"] if t["table"] == "events"]
    assert [t["key_range"]["range"] for t in events] == [1, 2, 3]
    assert [t["key_range"]["of"] for t in events] == [3, 3, 3]
    assert events[0]["key_range"]["lo"] is None and events[-1]["key_range"]["hi"] is None
    his = [t["key_range"]["hi"] for t in events[:-1]]
    assert his == sorted(his) and len(set(his)) == 2
    assert [t["key_range"]["lo"] for t in events[1:]] == his  # contiguous
    assert sum(t["rows"] for t in events) >= 2500
    names = [t["table"] for t in view["tables"]]  # each table's ranges after its first
    assert names[:3] == ["events"] * 3 and set(names[3:]) == {"users"}, names


def test_split_auto_leaves_tables_under_split_rows_whole(api: Api):
    r = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                      "split": "auto"})
    assert r.status_code == 202, r.text
    assert [t["key_range"] for t in r.json()["tables"]] == [None]


def test_bad_split_values_are_refused_saying_what_is_allowed(api: Api):
    for bad in (1, 65, True, "all", "3"):
        assert_problem(api.post("/v1/exports", json={
            "source": "main", "tables": ["events"], "split": bad}), 422)
    refused = assert_problem(api.post("/v1/exports", json={
        "source": "main", "tables": ["events"], "split": True}), 422)
    assert "split" in refused["detail"]
    plain = api.post("/v1/exports", json={"source": "main", "tables": ["events"],
                                          "split": False})
    assert plain.status_code == 202, plain.text
    assert plain.json()["tables"][0]["key_range"] is None

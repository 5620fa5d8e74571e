"""The web page's acceptance in Chromium: sign in, create from the form, live progress to
100 %, the detail page and a download checked against the manifest, cancel live, and
what is refused (wrong token, another project's export, a form without its CSRF token).
Each test ends by checking the browser asked nothing of any host but 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import WAIT_MS, Web, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

#: Records every value the progress bars take (attributes set by the page's script),
#: and a marker that a reload would lose.
WATCH_BARS = """() => {
  window.__noReload = true;
  window.__bars = [];
  new MutationObserver((changes) => {
    for (const c of changes) window.__bars.push(Number(c.target.value));
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ["value"]});
}"""


def test_sign_in_create_from_the_form_and_watch_it_finish(web: Web, slow_tables):
    slow_tables["events"] = 0.08  # 40 steps of 500 rows: the bar has time to move
    page = web.page()
    web.sign_in(page, web.tokens["alpha"])
    expect(page.get_by_role("heading", name="Exports")).to_be_visible()

    page.get_by_role("link", name="New export").first.click()
    page.wait_for_url("**/exports/new*")
    expect(page.get_by_label("events")).to_be_visible()  # the catalog of the only source
    expect(page.get_by_text("about 20\u202f000 rows")).to_be_visible()
    page.get_by_label("events").check()
    page.get_by_label("Format").select_option("jsonl")
    page.get_by_role("button", name="Estimate").click()
    expect(page.locator("#estimate")).to_contain_text("20\u202f000")  # the dry run first
    expect(page.get_by_label("events")).to_be_checked()  # the form kept its values
    page.get_by_role("button", name="Start export").click()
    page.wait_for_url("**/exports/exp_*")
    export_id = page.url.rsplit("/", 1)[1]

    page.goto("/exports")
    row = page.locator(f'tr[data-export="{export_id}"]')
    expect(row).to_be_visible()
    page.evaluate(WATCH_BARS)
    bar = row.locator("progress")
    expect(bar).to_have_attribute("value", "100", timeout=WAIT_MS)
    expect(row.locator('[data-role="status"]')).to_have_text("completed")
    seen = page.evaluate("window.__bars")
    assert any(0 < v < 100 for v in seen) and seen[-1] == 100, seen  # it moved, live
    assert page.evaluate("window.__noReload") is True  # ... without a reload
    expect(row.locator('[data-role="rows"]')).to_have_text("20\u202f000")
    web.assert_only_local_requests()


def test_detail_page_download_matches_the_manifest(web: Web, tmp_path: Path):
    export_id = web.create(web.tokens["alpha"], {"source": "main", "tables": ["orders", "users"],
                                                 "format": "csv"})
    web.wait_status(web.tokens["alpha"], export_id, "completed")
    page = web.page()
    web.sign_in(page, web.tokens["alpha"])
    page.get_by_role("link", name=export_id).click()
    page.wait_for_url(f"**/exports/{export_id}")
    expect(page.locator("li[data-table=orders] progress")).to_have_attribute("value", "100")
    with page.expect_download() as manifest_download:
        page.get_by_role("link", name="manifest.json").click()
    manifest = json.loads(Path(manifest_download.value.path()).read_bytes())
    expected = {f["name"]: f["sha256"] for f in manifest["files"]}
    with page.expect_download() as file_download:
        page.get_by_role("link", name="Download orders.csv").click()
    body = Path(file_download.value.path()).read_bytes()
    assert file_download.value.suggested_filename == "orders.csv"
    assert body.startswith(b"id,") and len(body) > 1000
    assert hashlib.sha256(body).hexdigest() == expected["orders.csv"]
    expect(page.get_by_text(f"sha256 {expected['orders.csv']}")).to_be_visible()
    web.assert_only_local_requests()


def test_cancel_a_running_export_is_seen_live(web: Web, slow_tables):
    slow_tables["events"] = 0.5  # about 20 s of reading: still running when cancelled
    token = web.tokens["alpha"]
    elsewhere = web.create(token, {"source": "main", "tables": ["events"]})
    here = web.create(token, {"source": "main", "tables": ["events"]})
    page = web.page()
    web.sign_in(page, token)

    # cancelled by someone else (the API) while the page is open: the page follows live
    page.goto(f"/exports/{elsewhere}")
    expect(page.locator(".head [data-role=status]")).to_have_text("running")
    page.evaluate(WATCH_BARS)
    r = web.api.post(f"/v1/exports/{elsewhere}/cancel",
                     headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    expect(page.locator(".head [data-role=status]")).to_have_text("cancelled")
    expect(page.locator("li[data-table=events] [data-role=status]")).to_have_text("cancelled")
    assert page.evaluate("window.__noReload") is True
    expect(page.get_by_role("button", name="Cancel export")).to_have_count(0)

    # cancelled from the page, after confirming
    page.goto(f"/exports/{here}")
    expect(page.locator(".head [data-role=status]")).to_have_text("running")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel export").click()
    expect(page.locator(".head [data-role=status]")).to_have_text("cancelled")
    assert web.wait_status(token, here, "cancelled")["status"] == "cancelled"
    web.assert_only_local_requests()


def test_new_exports_appear_on_the_open_list_and_finish_live(web: Web, slow_tables):
    slow_tables["events"] = 0.05
    token = web.tokens["alpha"]
    page = web.page()
    web.sign_in(page, token)  # an empty list: no export yet
    expect(page.locator("#empty")).to_be_visible()
    page.evaluate(WATCH_BARS)
    # created elsewhere (the API; the CLI would do the same) while the page is open
    other = web.create(web.tokens["beta"], {"source": "main", "tables": ["users"]})
    first = web.create(token, {"source": "main", "tables": ["events"]})
    row = page.locator(f'tr[data-export="{first}"]')
    expect(row).to_be_visible()
    expect(page.locator("#empty")).to_have_count(0)
    expect(row.locator("[data-role=status]")).to_have_text("completed")
    second = web.create(token, {"source": "main", "tables": ["users"]})
    expect(page.locator("tbody tr").first).to_have_attribute("data-export", second)
    expect(page.locator(f'tr[data-export="{second}"] [data-role=status]')).to_have_text(
        "completed")
    assert page.evaluate("window.__noReload") is True  # no reload happened
    assert max(page.evaluate("window.__bars")) == 100  # the bars moved live to the end
    # another project's export never shows
    assert page.locator(f'tr[data-export="{other}"]').count() == 0
    web.assert_only_local_requests()


def test_refused_wrong_token_other_project_and_missing_csrf(web: Web, slow_tables):
    slow_tables["events"] = 0.5
    beta_export = web.create(web.tokens["beta"], {"source": "main", "tables": ["users"]})
    running = web.create(web.tokens["alpha"], {"source": "main", "tables": ["events"]})
    page = web.page()

    page.goto("/")
    page.get_by_label("API token").fill("egr_not-a-real-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown or was revoked")
    expect(page.get_by_role("link", name="Exports")).to_have_count(0)  # no page data

    web.sign_in(page, web.tokens["alpha"])
    response = page.goto(f"/exports/{beta_export}")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("users")  # nothing of beta's export

    page.goto(f"/exports/{running}")
    page.locator("form[action$='/cancel'] input[name=csrf]").evaluate("el => el.remove()")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(f"**/exports/{running}/cancel") as posted:
        page.get_by_role("button", name="Cancel export").click()
    assert posted.value.status == 403
    expect(page.get_by_role("heading", name="Form refused")).to_be_visible()
    assert web.wait_status(web.tokens["alpha"], running, "running")["status"] == "running"
    web.assert_only_local_requests()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_screenshots(web: Web, slow_tables, dark: bool):
    slow_tables["events"] = 0.5
    token = web.tokens["alpha"]
    done = web.create(token, {"source": "main", "tables": ["orders", "users", "products"],
                              "format": "parquet", "compression": "zstd"})
    web.wait_status(token, done, "completed")
    web.create(token, {"source": "main", "tables": ["events"], "format": "csv",
                       "compression": "gzip"})
    scheme = "dark" if dark else "light"
    for width, size in ((1280, "desktop"), (375, "375px")):
        page = web.page(width=width, height=860 if width > 400 else 812, dark=dark)
        web.sign_in(page, token)
        expect(page.locator("tr[data-export] progress").first).to_be_visible()
        screenshot(page, f"list-{scheme}-{size}")
        page.goto(f"/exports/{done}")
        expect(page.get_by_role("heading", name="Files")).to_be_visible()
        screenshot(page, f"detail-{scheme}-{size}")
        page.goto("/exports/new")
        page.get_by_label("orders").check()
        page.get_by_role("button", name="Estimate").click()
        expect(page.locator("#estimate")).to_be_visible()
        screenshot(page, f"new-{scheme}-{size}")
        # text fits the small screen: nothing scrolls sideways
        assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
    web.assert_only_local_requests()

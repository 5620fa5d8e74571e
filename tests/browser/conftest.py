"""The web page in a real browser: Debian's Chromium driven by Playwright, the app served
by uvicorn on 127.0.0.1 with a real SQLite store, exports of the demo database run by the
embedded worker.

Every request the browser makes is recorded (``Web.requests``); each test asserts none
went to another host. Screenshots go to ``test-output/browser/`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from apiharness import LiveServer, Tokens, make_settings
from egress.cli.demo_data import build_demo_db
from egress.store.sql import SqlJobStore
from egress.web import create_site

CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
#: Demo rows: 20 000 events, 2 000 orders, 200 users.
DEMO_ROWS = 20_000
OUTPUT = Path(__file__).resolve().parents[2] / "test-output" / "browser"
#: Milliseconds any one wait of a test may take (each test is bounded by 60 s too).
WAIT_MS = 20_000
#: Bytes per part (the default is 8 MiB: the demo's tables would be one part each).
PART_SIZE = 64 * 1024


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_db(tmp_path_factory.mktemp("web-demo") / "demo.db", rows=DEMO_ROWS)


@pytest.fixture(scope="session")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web-store") / "store.db"
    store = SqlJobStore(f"sqlite:///{path}")
    store.migrate()
    store.close()
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = next((p for p in CHROMIUM if Path(p).is_file()), None)
    if executable is None:
        pytest.fail("Chromium is not installed: run `bash scripts/system-deps` "
                    "(apt-get install chromium)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS,
                                     headless=True)
        yield launched
        launched.close()


@dataclass
class Web:
    url: str
    store: SqlJobStore
    tokens: Tokens
    api: httpx.Client
    browser: Browser
    requests: list[str] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)

    def page(self, *, width: int = 1280, height: int = 860, dark: bool = False) -> Page:
        context = self.browser.new_context(
            base_url=self.url, viewport={"width": width, "height": height},
            color_scheme="dark" if dark else "light", accept_downloads=True)
        context.on("request", lambda r: self.requests.append(r.url))
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        self.pages.append(page)
        return page

    def sign_in(self, page: Page, token: str) -> None:
        page.goto("/")
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/exports")

    def create(self, token: str, body: dict[str, Any]) -> str:
        r = self.api.post("/v1/exports", json=body, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def wait_status(self, token: str, export_id: str, *states: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            view = self.api.get(f"/v1/exports/{export_id}",
                                headers={"Authorization": f"Bearer {token}"}).json()
            if view["status"] in states:
                return view  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, view
            time.sleep(0.05)

    def assert_only_local_requests(self) -> None:
        hosts = {urlsplit(u).hostname for u in self.requests if not u.startswith(("data:",
                                                                                  "blob:"))}
        assert self.requests and hosts == {"127.0.0.1"}, sorted(set(self.requests))


@pytest.fixture
def web(tmp_path: Path, demo_db: Path, store_template: Path, browser: Browser
        ) -> Iterator[Web]:
    shutil.copyfile(store_template, tmp_path / "store.db")
    settings = make_settings(tmp_path / "home", f"sqlite:///{tmp_path / 'store.db'}", demo_db)
    # small parts: progress is committed (and shown) every few hundred rows
    settings = replace(settings, export=replace(settings.export, part_size=PART_SIZE))
    store = SqlJobStore(settings.store_url)
    tokens = Tokens(store)
    tokens.make("alpha", "admin", label="alpha")
    tokens.make("alpha", "exports:read", label="reader")
    tokens.make("beta", "admin", label="beta")
    app = create_site(settings, store, run_worker=True)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(LiveServer(app))
        client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
        w = Web(server.url, store, tokens, client, browser)
        try:
            yield w
        finally:
            for page in w.pages:
                page.context.close()
    store.close()


@pytest.fixture
def slow_tables(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """``slow_tables[name] = seconds``: reading that table pauses that long every 500
    rows (the worker thread sleeps; the export stays running and visible for a while)."""
    from egress.sources.sqlite import SqliteSource

    delays: dict[str, float] = {}
    read = SqliteSource.read

    def slow_read(self: SqliteSource, table: Any, *args: Any, **kwargs: Any) -> Any:
        delay = delays.get(table.name)
        for batch in read(self, table, *args, **kwargs):
            if delay is None:
                yield batch
                continue
            for start in range(0, batch.num_rows, 500):
                time.sleep(delay)
                yield batch.slice(start, 500)

    monkeypatch.setattr(SqliteSource, "read", slow_read)
    return delays


def screenshot(page: Page, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path

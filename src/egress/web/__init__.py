"""The web page at ``/``: sign in with an API token, watch exports live, start, cancel,
retry and download them. Server-rendered (Jinja2), a little vanilla JavaScript, every
asset inside the package (works offline). See docs/web.md.

    guard.py      the session's principal, CSRF, errors as pages, security headers
    session.py    the signed, expiring session cookie
    pages.py      sign in/out, list, detail, actions, downloads
    newexport.py  the new-export form (catalog, dry-run estimate, create)
    live.py       server-sent events for the pages (one stream per page)

The web sits above the API (it uses its auth, schemas and errors), so the app as served is
composed here: ``create_site`` is the API plus the pages.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from egress.api.app import create_app
from egress.config import Settings
from egress.store.base import JobStore

STATIC_URL = "/static"


def install_web(app: FastAPI) -> None:
    """Mount the pages and their static files on ``app`` (after the API's routes)."""
    from egress.web import live, newexport, pages
    from egress.web.session import session_key

    app.state.web_session_key = session_key(app.state.link_key)
    app.mount(STATIC_URL, StaticFiles(directory=Path(__file__).parent / "static"),
              name="web-static")
    # /exports/new before /exports/{export_id}
    for router in (newexport.router, live.router, pages.router):
        app.include_router(router)


def create_site(
    settings: Settings, store: JobStore | None = None, *, run_worker: bool = False
) -> FastAPI:
    """The app ``egress serve`` runs: the HTTP API (``create_app``) with the web page."""
    app = create_app(settings, store, run_worker=run_worker)
    install_web(app)
    return app

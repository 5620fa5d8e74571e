"""The web page at ``/``: sign in with an API token, watch exports live, start, cancel,
retry and download them. Server-rendered (Jinja2), a little vanilla JavaScript, every
asset inside the package (works offline). See docs/web.md.

    guard.py      the session's principal, CSRF, errors as pages, security headers
    session.py    the signed, expiring session cookie
    pages.py      sign in/out, list, detail, actions, downloads
    newexport.py  the new-export form (catalog, dry-run estimate, create)
    live.py       server-sent events for the pages (one stream per page)
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

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

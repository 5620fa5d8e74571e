"""Templates (shipped in the package) and the security headers of every page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from starlette.requests import Request
from starlette.responses import Response

from egress import __version__
from egress.web.format import FILTERS, percent

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters.update(FILTERS)
templates.env.globals.update(percent=percent, version=__version__)

#: No inline script or style, nothing from another origin, never inside a frame.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
       "object-src 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}


def secure(response: Response) -> Response:
    """Every page's security headers; pages also stay out of shared caches."""
    response.headers.update(SECURITY_HEADERS)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def page(request: Request, name: str, code: int = 200, **context: Any) -> Response:
    session = getattr(request.state, "web_session", None)
    principal = getattr(request.state, "principal", None)
    context.setdefault("csrf", session.csrf if session is not None else "")
    context.setdefault("project", principal.project if principal is not None else None)
    return templates.TemplateResponse(request, name, context, status_code=code)

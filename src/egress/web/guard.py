"""Who is asking and may they: the session's token checked like a bearer token, the CSRF
token of every form post, and errors turned into pages (never JSON, never data).

:class:`WebRoute` wraps every web route: it adds the security headers and renders any
error as a page with the status the API would answer, and a sign-in page (401) for a
missing, expired or revoked session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.responses import Response

from egress.api.auth import authenticate_digest, check_scope
from egress.api.errors import Unauthorized, error_response
from egress.domain.access import Principal
from egress.web.render import page, secure
from egress.web.session import (
    COOKIE,
    CSRF_FIELD,
    csrf_ok,
    new_session,
    read_session,
    set_session,
)

log = logging.getLogger(__name__)

#: Form bodies larger than this are refused (the page's forms are small).
MAX_FORM_BYTES = 256 * 1024


class SignInRequired(Exception):
    """No valid session: the sign-in page answers, with ``message`` when there is one."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "sign in")
        self.message = message


class CsrfRefused(Exception):
    """A state-changing form without the session's CSRF token."""


async def web_principal(request: Request) -> Principal:
    session = read_session(request)
    if session is None or session.digest is None:
        # a cookie that no longer verifies (expired, another key) says why it is refused
        ended = session is None and COOKIE in request.cookies
        raise SignInRequired("Your session has ended: sign in again." if ended else None)
    request.state.web_session = session
    try:
        return await authenticate_digest(request, session.digest)
    except Unauthorized as exc:
        raise SignInRequired("The API token of this session is unknown or was revoked: "
                             "sign in with a valid token.") from exc


def login_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    """The sign-in form, with a fresh anonymous session (its CSRF token) in the cookie."""
    session = new_session()
    request.state.web_session = session
    request.state.principal = None  # nothing of a refused session shows on the page
    response = page(request, "login.html", status, message=message)
    set_session(request, response, session)
    return response


WebPrincipal = Annotated[Principal, Depends(web_principal)]


def needs(scope: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """A dependency: the signed-in caller, 403 page unless the token has ``scope``."""

    async def dependency(principal: WebPrincipal) -> Principal:
        return check_scope(principal, scope)

    return dependency


async def read_form(request: Request) -> dict[str, list[str]]:
    """The url-encoded form of a POST, its CSRF token checked against the session's."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise CsrfRefused("the form is too large")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise CsrfRefused(f"a form post must be application/x-www-form-urlencoded, not "
                          f"{kind or 'without a content type'}")
    try:
        form = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=2000)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CsrfRefused("the form could not be read") from exc
    session = getattr(request.state, "web_session", None) or read_session(request)
    sent = form.get(CSRF_FIELD, [None])[0]
    if not csrf_ok(session, sent):
        raise CsrfRefused("the form's security token (CSRF) is missing or does not match "
                          "this session")
    return form


def error_page(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SignInRequired):
        return login_page(request, exc.message, 401)
    if isinstance(exc, RequestValidationError):
        where = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}"
                          for e in exc.errors()[:5])
        return page(request, "error.html", 422, title="Invalid request",
                    detail=f"the address asks for something not allowed: {where}")
    if isinstance(exc, CsrfRefused):
        return page(request, "error.html", 403, title="Form refused",
                    detail=f"{exc}. Reload the page and submit the form again.")
    status, title, detail, headers = problem_of(exc)
    response = page(request, "error.html", status, title=title, detail=detail)
    if "retry-after" in headers:
        response.headers["Retry-After"] = headers["retry-after"]
    return response


def problem_of(exc: Exception) -> tuple[int, str, str, dict[str, str]]:
    """The API's status, title and detail for ``exc`` (hosts, paths and driver text
    masked exactly as the API masks them)."""
    problem = error_response(exc)
    body = json.loads(bytes(problem.body))
    return problem.status_code, body["title"], body["detail"], dict(problem.headers)


class WebRoute(APIRoute):
    """A page route: security headers on every answer, errors as pages."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as exc:  # every error is a page; internal ones are logged
                response = error_page(request, exc)
            return secure(response)

        return route

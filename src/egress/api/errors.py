"""Every error of the API as ``application/problem+json`` (RFC 9457).

    {"type": "urn:egress:problem:not-found", "title": "Not found", "status": 404,
     "detail": "no export 'exp_…' in project 'acme'"}

``detail`` says what was wrong and what is allowed. Egress errors map to a status here,
in one table; errors of the HTTP layer (auth, limits) are :class:`ApiError` subclasses.
Internal errors answer 500 with a generic detail; what went wrong goes to the log, never
to the caller (messages of drivers can carry hosts and paths).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from egress.exceptions import (
    ConfigError,
    EgressError,
    IdempotencyConflictError,
    NotFoundError,
    SinkError,
    SinkUnavailableError,
    SourceError,
    SourceUnavailableError,
    StoreError,
)
from egress.redact import redact

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:egress:problem:"


class Problem(BaseModel):
    """An error (RFC 9457 problem details)."""

    type: str = Field(description="A URN naming the kind of problem, e.g. "
                                  "urn:egress:problem:not-found")
    title: str
    status: int
    detail: str = Field(description="What was wrong and what is allowed.")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Request validation errors: location, message, type."
    )


class ApiError(EgressError):
    """An error of the HTTP layer, with its status and problem type."""

    status = 400
    slug = "bad-request"
    title = "Bad request"

    def __init__(self, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}


class Unauthorized(ApiError):
    status, slug, title = 401, "unauthorized", "Unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, {"WWW-Authenticate": 'Bearer realm="egress"'})


class Forbidden(ApiError):
    status, slug, title = 403, "forbidden", "Forbidden"


class Gone(ApiError):
    status, slug, title = 410, "gone", "Gone"


class PayloadTooLarge(ApiError):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class TooManyRequests(ApiError):
    status, slug, title = 429, "too-many-requests", "Too many requests"

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(detail, {"Retry-After": str(max(1, math.ceil(retry_after)))})


class NotSupported(ApiError):
    status, slug, title = 422, "not-supported", "Not supported"


# (exception class, status, slug, title), most specific first.
_MAPPING: tuple[tuple[type[Exception], int, str, str], ...] = (
    (NotFoundError, 404, "not-found", "Not found"),
    (IdempotencyConflictError, 409, "idempotency-conflict", "Idempotency key conflict"),
    (ConfigError, 422, "invalid-request", "Invalid request"),
    (SourceUnavailableError, 503, "source-unavailable", "Source unavailable"),
    (SourceError, 422, "source-error", "The source refused the request"),
    (SinkUnavailableError, 503, "destination-unavailable", "Destination unavailable"),
    (StoreError, 503, "store-unavailable", "Job store unavailable"),
)
#: Details that replace the message of errors whose text may name hosts or paths.
_GENERIC = {
    "source-unavailable": "the source cannot be reached right now; try again later",
    "destination-unavailable": "the destination cannot be reached right now; try again later",
    "store-unavailable": "the job store cannot be reached right now; try again later",
}
RETRY_AFTER_UNAVAILABLE = "5"


def problem(
    status: int, slug: str, title: str, detail: str, headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"type": TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def error_response(exc: Exception) -> JSONResponse:
    """The problem response of any exception raised while handling a request."""
    if isinstance(exc, ApiError):
        return problem(exc.status, exc.slug, exc.title, exc.detail, exc.headers)
    for cls, status, slug, title in _MAPPING:
        if isinstance(exc, cls):
            if slug in _GENERIC:
                log.warning("request failed", extra={"problem": slug, "error": redact(str(exc))})
                return problem(status, slug, title, _GENERIC[slug],
                               {"Retry-After": RETRY_AFTER_UNAVAILABLE})
            return problem(status, slug, title, redact(str(exc)))
    if isinstance(exc, SinkError):
        log.error("destination error", extra={"error": redact(str(exc))})
        return problem(502, "destination-error", "Destination error",
                       "the destination failed; the error is in the server's log")
    log.error("internal error", exc_info=(type(exc), exc, exc.__traceback__))
    return problem(500, "internal-error", "Internal server error",
                   "an unexpected error; it is in the server's log")


async def _egress_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # location, message and type only: the input may hold anything
    errors = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    unparsed = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if unparsed is not None:
        # a body that is not JSON at all is a bad request (400), not a schema mismatch;
        # the decoder's reason names a position, never the body's text
        reason = str((unparsed.get("ctx") or {}).get("error") or "not JSON")
        position = unparsed.get("loc", ("body", "?"))[-1]
        return problem(400, "bad-request", "Bad request",
                       f"the request body is not valid JSON: {reason} (at character "
                       f"{position}); send one JSON object, UTF-8 encoded", errors=errors)
    where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:5])
    return problem(422, "validation-error", "Invalid request",
                   f"the request does not match the API schema: {where}", errors=errors)


_HTTP = {
    400: ("bad-request", "Bad request"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    416: ("range-not-satisfiable", "Range not satisfiable"),
}


#: FastAPI's detail for a body it cannot decode (not UTF-8, say).
_UNREADABLE_BODY = "There was an error parsing the body"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Errors raised by the HTTP layer itself (an unknown path, a wrong method)."""
    assert isinstance(exc, StarletteHTTPException)
    slug, title = _HTTP.get(exc.status_code, ("http-error", "HTTP error"))
    if exc.status_code == 404:
        detail = f"no such resource: {request.url.path}; the API is described at /openapi.json"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        methods = sorted({m for regex, ms in getattr(request.app.state, "allowed_methods", ())
                          if regex.match(request.url.path) for m in ms})
        if methods:
            headers["Allow"] = ", ".join(methods)
        detail = (f"method {request.method} is not allowed on {request.url.path}; "
                  f"allowed: {headers.get('Allow', 'none')}")
    elif exc.status_code == 400 and exc.detail == _UNREADABLE_BODY:
        detail = "the request body cannot be decoded: send one JSON object, UTF-8 encoded"
    elif exc.status_code != 404:
        detail = exc.detail if isinstance(exc.detail, str) else title
    return problem(exc.status_code, slug, title, detail, headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(EgressError, _egress_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)


def problem_doc(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


#: Error responses every authenticated operation may give (for the OpenAPI document).
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: problem_doc("Missing, unknown or revoked token"),
    403: problem_doc("The token lacks the scope this operation needs"),
    422: problem_doc("The request is invalid: the detail says what is allowed"),
    429: problem_doc("Rate limit of the token exceeded (see Retry-After)"),
    503: problem_doc("The store, a source or a destination is unreachable (see Retry-After)"),
}
NOT_FOUND = {404: problem_doc("No such export (or not in the caller's project)")}
BODY_ERRORS = {400: problem_doc("The body is not JSON (or not UTF-8)"),
               413: problem_doc("Request body too large")}


def use_problem_media_type(schema: dict[str, Any]) -> dict[str, Any]:
    """Error responses of the OpenAPI document as application/problem+json (FastAPI puts
    every response model under the media type of the route's response class)."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if not (status.isdigit() and int(status) >= 400 and content):
                    continue
                # under whatever media type the route's response class has (JSON, SSE…)
                schema_of = next(iter(content.values())).get("schema", {})
                if schema_of.get("$ref", "").endswith("/Problem"):
                    response["content"] = {PROBLEM_JSON: {"schema": schema_of}}
    return schema

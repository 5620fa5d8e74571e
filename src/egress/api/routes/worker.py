"""The internal worker routes: ``POST /internal/v1/worker/<operation>``, one per
:class:`~egress.store.base.WorkerStore` operation, for workers that hold no database
credentials (``egress worker --api``; the client is ``store/over_api.py``).

Only tokens of scope ``worker`` may call them, and such a token may call nothing else
(api/auth.py). Each call runs the same store method as a worker with a direct store, so
the fencing by lease token is the store's own. The routes are left out of the OpenAPI
document: they are a contract between egress processes of one version, not a public API.
"""

from __future__ import annotations

import inspect
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from egress import __version__
from egress.api.auth import authenticate
from egress.api.deps import StoreDep
from egress.api.errors import ApiError
from egress.domain.access import Principal
from egress.store.base import WORKER_OPERATIONS
from egress.store.over_api import ROUTE_PREFIX, VERSION_HEADER
from egress.store.wire import WireError, decode, encode

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
_warned_versions: set[str] = set()


class UnknownOperation(ApiError):
    status, slug, title = 404, "unknown-operation", "Unknown worker operation"


class BadCall(ApiError):
    status, slug, title = 422, "bad-worker-call", "Bad worker call"


class WorkerCall(BaseModel):
    """A store call in the wire form of ``store/wire.py``."""

    args: list[Any] = []
    kwargs: dict[str, Any] = {}


async def worker_principal(request: Request) -> Principal:
    principal = await authenticate(request, worker=True)
    version = request.headers.get(VERSION_HEADER)
    if version and version != __version__ and version not in _warned_versions:
        _warned_versions.add(version)  # once per version, not once per call
        log.warning("a worker of another egress version calls the worker routes",
                    extra={"worker_version": version, "api_version": __version__})
    return principal


@router.post(ROUTE_PREFIX + "{operation}")
def call(
    operation: str,
    body: WorkerCall,
    store: StoreDep,
    _: Annotated[Principal, Depends(worker_principal)],
) -> JSONResponse:
    if operation not in WORKER_OPERATIONS:
        raise UnknownOperation(f"no worker operation {operation!r}; known: "
                               f"{', '.join(sorted(WORKER_OPERATIONS))}")
    method = getattr(store, operation)
    try:
        args, kwargs = decode(body.args), decode(body.kwargs)
        # bound before the call: a TypeError from inside the store is not a bad request
        inspect.signature(method).bind(*args, **kwargs)
    except (WireError, TypeError) as exc:
        raise BadCall(f"{operation}: {exc}") from None
    return JSONResponse({"result": encode(method(*args, **kwargs))})

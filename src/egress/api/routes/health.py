"""``/healthz`` (the process answers), ``/readyz`` (the store is reachable and migrated)
and ``/metrics`` (Prometheus). None of them needs a token or says anything secret."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.responses import Response

from egress.api.deps import StoreDep
from egress.api.errors import problem, problem_doc
from egress.api.schemas import Health
from egress.exceptions import StoreError

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    summary="Readiness: the job store is reachable and its schema is current",
    responses={200: {"model": Health}, 503: problem_doc("Not ready; `detail` says why")},
)
def readyz(store: StoreDep) -> Response:
    try:
        current = store.schema_current()
    except StoreError:
        return problem(503, "not-ready", "Not ready", "the job store cannot be reached")
    if not current:
        return problem(503, "not-ready", "Not ready",
                       "the job store's schema is not current: run 'egress migrate'")
    return JSONResponse({"status": "ok", "detail": None})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "Prometheus text exposition format"}},
)
def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

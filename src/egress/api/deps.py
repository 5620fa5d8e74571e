"""FastAPI dependencies shared by every router: the store, the settings, the caller.

Contract for routers:

    @router.get("/v1/exports/{export_id}")
    def show(export_id: str, principal: PrincipalDep, store: StoreDep) -> ...:
        ...

    @router.post("/v1/exports/{export_id}/cancel",
                 dependencies=[Depends(require_scope("exports:cancel"))])

``Principal.project`` scopes every query: another project's id answers 404.

The dependencies are ``async def`` although they do not wait on anything (except a
token lookup, which runs in a worker thread): FastAPI runs a plain ``def`` dependency in
its thread pool, a hand-off that cost more than the dependency itself.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request

from egress.api.auth import authenticate, check_scope
from egress.config import Settings
from egress.domain.access import Principal
from egress.store.base import JobStore


async def get_store(request: Request) -> JobStore:
    return request.app.state.store


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_principal(request: Request) -> Principal:
    """Authenticates ``Authorization: Bearer <token>``; 401 problem when missing/invalid
    (api/auth.py)."""
    return await authenticate(request)


def require_scope(scope: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """A dependency that answers 403 unless the caller's token has ``scope`` (or admin)."""

    async def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        return check_scope(principal, scope)

    return dependency


StoreDep = Annotated[JobStore, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]

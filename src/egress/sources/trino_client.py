"""A small client of Trino's REST protocol (protocol v1, "Client REST API" of the Trino
docs), shaped for egress's stored-``nextUri`` model.

The official ``trino`` package follows ``nextUri`` inside one process; egress must stop
after any response, keep the next URI in the job store, and let another worker continue
from it. So this client does one request per call and hands back what the engine said:
``submit`` (``POST /v1/statement``), ``fetch`` (``GET nextUri``), ``cancel``
(``DELETE nextUri``) and ``lookup`` (``GET /v1/query/{id}``). Headers follow the
``trino`` package (roles as ``system=ROLE{name}``, URL-quoted).

502, 503 and 504 are retried after 50–100 ms (a coordinator restarting or a proxy), up to
``retries`` times. A 410 on a ``nextUri`` means the engine no longer holds that result
(ResultGoneError). The password (``trino+https`` only, HTTP basic auth) never reaches a
log line: it is not part of any URL egress keeps, and errors carry no headers.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from egress.exceptions import (
    ConfigError,
    EngineQueryError,
    ResultGoneError,
    SourceAccessError,
    SourceUnavailableError,
)

#: Header value for ``X-Trino-Source`` unless the source's URL sets ``?source=``.
DEFAULT_SOURCE = "egress"
#: Client tag of every query egress sends (resource groups can select on it).
EXPORT_TAG = "egress-export"
PASSWORD_ENV = "EGRESS_TRINO_PASSWORD"
_RETRY_STATUS = frozenset({502, 503, 504})
#: Query states in which the engine has not started producing the result.
WAITING_STATES = frozenset({"QUEUED", "WAITING_FOR_RESOURCES", "DISPATCHING", "PLANNING",
                            "STARTING"})


@dataclass(frozen=True)
class TrinoEndpoint:
    """Where a ``trino://USER@HOST:PORT/CATALOG/SCHEMA`` URL points."""

    base_url: str
    user: str
    catalog: str
    schema: str
    password: str | None = field(default=None, repr=False)
    source: str = DEFAULT_SOURCE

    @classmethod
    def parse(cls, url: str) -> TrinoEndpoint:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("trino", "trino+http", "trino+https"):
            raise ConfigError(f"not a Trino URL (trino:// or trino+https://): {scheme}://…")
        tls = scheme == "trino+https"
        path = [unquote(p) for p in parts.path.split("/") if p]
        if not parts.username or not parts.hostname or len(path) != 2:
            raise ConfigError(
                "a Trino source is trino://USER@HOST:PORT/CATALOG/SCHEMA "
                "(trino+https://… for TLS); this URL lacks the "
                + ("user" if not parts.username else "host" if not parts.hostname
                   else "catalog and schema"))
        password = unquote(parts.password) if parts.password else os.environ.get(PASSWORD_ENV)
        if password and not tls:
            raise ConfigError("a Trino password is sent only over TLS: use trino+https://")
        port = parts.port or (443 if tls else 8080)
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        return cls(base_url=f"{'https' if tls else 'http'}://{parts.hostname}:{port}",
                   user=unquote(parts.username), catalog=path[0], schema=path[1],
                   password=password or None,
                   source=unquote(query.get("source", DEFAULT_SOURCE)))


@dataclass(frozen=True)
class QueryResults:
    """One response of the engine about a query."""

    id: str
    state: str
    next_uri: str | None
    #: [[name, type], …] once the engine knows the result's shape; None before.
    columns: list[list[str]] | None = None
    data: list[list[Any]] = field(default_factory=list)
    error: EngineQueryError | None = None

    @property
    def waiting(self) -> bool:
        """Queued, planning or starting: nothing to read yet."""
        return self.columns is None and self.error is None and self.next_uri is not None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> QueryResults:
        state = (body.get("stats") or {}).get("state", "UNKNOWN")
        error = None
        if body.get("error"):
            e = body["error"]
            error = EngineQueryError(e.get("errorName") or "UNKNOWN", e.get("message") or "",
                                     e.get("errorType"))
        columns = None
        if body.get("columns") is not None:
            columns = [[c["name"], c["type"]] for c in body["columns"]]
        return cls(id=body["id"], state=state, next_uri=body.get("nextUri"),
                   columns=columns, data=body.get("data") or [], error=error)


def role_header(role: str) -> str:
    """``X-Trino-Role`` for a role of the system catalog, as the ``trino`` package sends it."""
    value = role if role in ("ALL", "NONE") else f"ROLE{{{role}}}"
    return f"system={quote(value)}"


class TrinoClient:
    def __init__(
        self, endpoint: TrinoEndpoint, *, timeout: float = 30.0, retries: int = 20,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint, self.retries, self._sleep = endpoint, retries, sleep
        auth = (endpoint.user, endpoint.password) if endpoint.password else None
        self._http = httpx.Client(timeout=timeout, auth=auth, follow_redirects=False,
                                  trust_env=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TrinoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def headers(self, role: str | None, tags: Sequence[str] = ()) -> dict[str, str]:
        e = self.endpoint
        headers = {
            "X-Trino-User": e.user,
            "X-Trino-Source": e.source,
            "X-Trino-Catalog": e.catalog,
            "X-Trino-Schema": e.schema,
            "X-Trino-Client-Tags": ",".join(dict.fromkeys((EXPORT_TAG, *tags))),
        }
        if role:
            headers["X-Trino-Role"] = role_header(role)
        return headers

    def _request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                 content: str | None = None, timeout: float | None = None) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(
                    method, url, headers=headers, content=content,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
            except httpx.TimeoutException:
                raise  # the caller decides (a cold start is retried by the submitter)
            except httpx.TransportError as exc:
                raise SourceUnavailableError(
                    f"Trino at {self.endpoint.base_url} cannot be reached: {exc}") from exc
            if response.status_code not in _RETRY_STATUS:
                return response
            if attempt < self.retries:
                self._sleep(random.uniform(0.05, 0.1))
        raise SourceUnavailableError(
            f"Trino at {self.endpoint.base_url} answered {response.status_code} "
            f"{self.retries + 1} times in a row")

    def _results(self, response: httpx.Response, what: str) -> QueryResults:
        if response.status_code == 410:
            raise ResultGoneError(f"the engine no longer holds this result ({what}: 410 Gone)")
        if response.status_code in (401, 403):
            raise SourceAccessError(
                f"Trino refused user {self.endpoint.user!r} ({response.status_code}): "
                f"{response.text.strip()[:200]}")
        if response.status_code != 200:
            raise SourceUnavailableError(
                f"Trino answered {response.status_code} to {what}: {response.text.strip()[:200]}")
        return QueryResults.from_json(response.json())

    def submit(self, sql: str, *, role: str | None, tags: Sequence[str] = (),
               timeout: float | None = None) -> QueryResults:
        """``POST /v1/statement``: the engine queues the query and answers its id."""
        response = self._request("POST", f"{self.endpoint.base_url}/v1/statement",
                                 headers=self.headers(role, tags), content=sql,
                                 timeout=timeout)
        return self._results(response, "submit")

    def fetch(self, next_uri: str, *, role: str | None = None) -> QueryResults:
        """``GET nextUri``: the query's state, and the next page of its result."""
        self._check_same_server(next_uri)
        response = self._request("GET", next_uri, headers=self.headers(role))
        return self._results(response, "poll")

    def cancel(self, next_uri: str) -> None:
        """``DELETE nextUri``: stop the query on the engine (best effort)."""
        self._check_same_server(next_uri)
        self._request("DELETE", next_uri, headers=self.headers(None))

    def lookup(self, query_id: str) -> dict[str, Any] | None:
        """``GET /v1/query/{id}``: what the engine knows of a query (None: nothing)."""
        response = self._request(
            "GET", f"{self.endpoint.base_url}/v1/query/{quote(query_id, safe='')}",
            headers=self.headers(None))
        if response.status_code in (404, 410):
            return None
        if response.status_code != 200:
            raise SourceUnavailableError(
                f"Trino answered {response.status_code} to a query lookup")
        info: dict[str, Any] = response.json()
        return info

    def kill(self, query_id: str) -> None:
        """``DELETE /v1/query/{id}``: stop a query known only by its id (best effort)."""
        self._request("DELETE",
                      f"{self.endpoint.base_url}/v1/query/{quote(query_id, safe='')}",
                      headers=self.headers(None))

    def _check_same_server(self, uri: str) -> None:
        # a nextUri comes from the store: never send the session's credentials elsewhere
        base = urlsplit(self.endpoint.base_url)
        target = urlsplit(uri)
        if (target.scheme, target.hostname, target.port or None) != (
                base.scheme, base.hostname, base.port or None):
            raise SourceAccessError("a next URI points to another server than the source's")

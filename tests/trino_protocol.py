"""A Trino coordinator as its clients see it: the client REST protocol (v1) on 127.0.0.1.

No Trino server can be installed on these machines, so this plays the documented
responses ("Client REST API" of the Trino docs): ``POST /v1/statement`` queues a query;
``GET nextUri`` answers QUEUED for a while, then the result's columns and its data pages,
the last one FINISHED without a ``nextUri`` (or FAILED with an ``error``); ``DELETE
nextUri`` cancels; ``GET /v1/query/{id}`` looks a query up. Like the real coordinator it
keeps only the last page it served: asking for that token again answers the same page,
the next token moves on, anything else is 410 Gone.

What a query returns comes from responders the tests register (a regex on the SQL), and
how it behaves (queued polls, page size, failure) from a QueryPlan. Every request is
recorded, with its headers and the status answered.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Result:
    columns: list[tuple[str, str]]
    rows: list[list[Any]]


@dataclass
class EngineError(Exception):
    message: str
    name: str = "GENERIC_USER_ERROR"
    type: str = "USER_ERROR"
    code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "errorCode": self.code, "errorName": self.name,
                "errorType": self.type,
                "failureInfo": {"type": "io.trino.spi.TrinoException", "message": self.message}}


@dataclass
class QueryPlan:
    queued_polls: int = 0
    running_polls: int = 0
    page_rows: int = 100
    #: FAILED after this many data pages (0: right after the queued polls)
    fail_after_pages: int | None = None
    error: EngineError | None = None
    #: seconds each data page takes to come (a long-running query)
    page_delay: float = 0.0


Responder = Callable[[str, Mapping[str, str]], Result]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: str
    at: float
    status: int = 0


@dataclass
class QueryState:
    id: str
    slug: str
    sql: str
    headers: dict[str, str]
    plan: QueryPlan
    result: Result | None
    error: EngineError | None
    state: str = "QUEUED"
    cancelled: bool = False
    expired: bool = False
    #: the token served last (0: none yet) and its response
    last_token: int = 0
    last_body: dict[str, Any] | None = None
    responses: int = 0
    pages_sent: int = 0


def _stats(state: str) -> dict[str, Any]:
    return {"state": state, "queued": state == "QUEUED", "scheduled": state != "QUEUED",
            "nodes": 1, "totalSplits": 0, "queuedSplits": 0, "runningSplits": 0,
            "completedSplits": 0, "cpuTimeMillis": 0, "wallTimeMillis": 0,
            "queuedTimeMillis": 0, "elapsedTimeMillis": 0, "processedRows": 0,
            "processedBytes": 0, "physicalInputBytes": 0, "peakMemoryBytes": 0,
            "spilledBytes": 0}


class TrinoProtocolServer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._responders: list[tuple[re.Pattern[str], Responder]] = []
        self._plans: list[tuple[re.Pattern[str], QueryPlan]] = []
        self._fail_next: list[tuple[int, str | None]] = []
        self._post_delays: list[float] = []
        self._expire_all = False
        self._counter = 0
        self.requests: list[Recorded] = []
        self.queries: dict[str, QueryState] = {}
        self.deleted: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                record = Recorded(self.command, self.path, dict(self.headers.items()), body,
                                  time.monotonic())
                with server._lock:
                    server.requests.append(record)
                status, payload = server._answer(record)
                record.status = status
                data = payload.encode() if isinstance(payload, str) else json.dumps(
                    payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(
                    payload, str) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _handle

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread: threading.Thread | None = None

    # --- control ------------------------------------------------------------------------

    def start(self) -> TrinoProtocolServer:
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> TrinoProtocolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respond(self, pattern: str, responder: Responder) -> None:
        self._responders.append((re.compile(pattern, re.DOTALL | re.IGNORECASE), responder))

    def plan_for(self, pattern: str, plan: QueryPlan) -> None:
        self._plans.append((re.compile(pattern, re.DOTALL | re.IGNORECASE), plan))

    def fail_next(self, n: int, status: int = 503, method: str | None = None) -> None:
        with self._lock:
            self._fail_next.extend([(status, method)] * n)

    def post_delay(self, n: int, seconds: float) -> None:
        with self._lock:
            self._post_delays.extend([seconds] * n)

    def expire(self, query_id: str | None = None) -> None:
        with self._lock:
            if query_id is None:
                self._expire_all = True
            else:
                self.queries[query_id].expired = True

    def finish_without_client(self, query_id: str) -> None:
        with self._lock:
            self.queries[query_id].state = "FINISHED"

    # --- the protocol -------------------------------------------------------------------

    def _answer(self, r: Recorded) -> tuple[int, Any]:
        with self._lock:
            for i, (status, method) in enumerate(self._fail_next):
                if method is None or method == r.method:
                    del self._fail_next[i]
                    return status, "<html><body>503 Service Unavailable</body></html>"
            delay = self._post_delays.pop(0) if r.method == "POST" and self._post_delays \
                else 0.0
        if delay:
            time.sleep(delay)  # a cold resource group: the client gives up first
        path = r.path.split("?", 1)[0]
        if r.method == "POST" and path == "/v1/statement":
            return self._submit(r)
        m = re.fullmatch(r"/v1/statement/(queued|executing)/([^/]+)/([^/]+)/(\d+)", path)
        if m:
            return self._next(r, m.group(2), m.group(3), int(m.group(4)))
        m = re.fullmatch(r"/v1/query/([^/]+)", path)
        if m and r.method in ("GET", "DELETE"):
            return self._lookup(r.method, m.group(1))
        return 404, f"no route {r.method} {path}"

    def _submit(self, r: Recorded) -> tuple[int, Any]:
        headers = {k.lower(): v for k, v in r.headers.items()}
        if not headers.get("x-trino-user"):
            return 400, "User must be set"
        sql = r.body
        result: Result | None = None
        error: EngineError | None = None
        responder = next((fn for p, fn in self._responders if p.search(sql)), None)
        try:
            if responder is None:
                raise EngineError("line 1:1: no responder for this SQL in the test server",
                                  "SYNTAX_ERROR", "USER_ERROR", 1)
            result = responder(sql, headers)
        except EngineError as exc:
            error = exc
        except Exception as exc:  # a responder's bug: the query fails, visibly
            error = EngineError(repr(exc), "GENERIC_INTERNAL_ERROR", "INTERNAL_ERROR", 65536)
        plan = next((p for pat, p in self._plans if pat.search(sql)), QueryPlan())
        with self._lock:
            self._counter += 1
            qid = time.strftime("%Y%m%d_%H%M%S_", time.gmtime()) + \
                f"{self._counter:05d}_{secrets.token_hex(3)[:5]}"
            q = QueryState(qid, secrets.token_hex(8), sql, headers, plan, result, error)
            self.queries[qid] = q
            return 200, {"id": qid, "infoUri": f"{self.url}/ui/query.html?{qid}",
                         "nextUri": self._uri(q, 1), "stats": _stats("QUEUED"),
                         "warnings": []}

    def _uri(self, q: QueryState, token: int) -> str:
        kind = "queued" if q.state == "QUEUED" else "executing"
        return f"{self.url}/v1/statement/{kind}/{q.id}/{q.slug}/{token}"

    def _next(self, r: Recorded, qid: str, slug: str, token: int) -> tuple[int, Any]:
        with self._lock:
            q = self.queries.get(qid)
            if q is None or q.slug != slug:
                return 404, "Query not found"
            if r.method == "DELETE":
                q.cancelled = True
                if q.state not in ("FINISHED", "FAILED"):
                    q.state = "FAILED"
                    q.error = EngineError("Query was canceled", "USER_CANCELED", "USER_ERROR", 3)
                self.deleted.append(qid)
                return 204, ""
            if q.expired or self._expire_all or q.cancelled:
                return 410, "Gone"
            if token == q.last_token and q.last_body is not None:
                return 200, q.last_body  # the client asks again: the same page
            if token != q.last_token + 1:
                return 410, "Gone"
            delay = q.plan.page_delay if q.responses >= q.plan.queued_polls else 0.0
        if delay:
            time.sleep(delay)
        with self._lock:
            if q.last_token + 1 != token:  # another client took this token meanwhile
                return 410, "Gone"
            body = self._advance(q, token)
            q.last_token, q.last_body = token, body
            return 200, body

    def _advance(self, q: QueryState, token: int) -> dict[str, Any]:
        plan = q.plan
        q.responses += 1
        if q.responses <= plan.queued_polls:
            q.state = "QUEUED"
            return {"id": q.id, "nextUri": self._uri(q, token + 1), "stats": _stats("QUEUED")}
        q.state = "RUNNING"
        fail_at = plan.fail_after_pages
        if q.error is not None and fail_at is None:
            fail_at = 0
        if fail_at is not None and q.pages_sent >= fail_at:
            error = q.error or plan.error or EngineError(
                "Query failed", "GENERIC_INTERNAL_ERROR", "INTERNAL_ERROR", 65536)
            if plan.error is not None and q.error is None:
                error = plan.error
            q.state, q.error = "FAILED", error
            return {"id": q.id, "stats": _stats("FAILED"), "error": error.to_json()}
        assert q.result is not None
        columns = [{"name": n, "type": t,
                    "typeSignature": {"rawType": t.split("(", 1)[0], "arguments": []}}
                   for n, t in q.result.columns]
        running = q.responses - plan.queued_polls
        if running <= plan.running_polls:
            return {"id": q.id, "columns": columns, "nextUri": self._uri(q, token + 1),
                    "stats": _stats("RUNNING")}
        start = q.pages_sent * plan.page_rows
        page = q.result.rows[start:start + plan.page_rows]
        q.pages_sent += 1
        body: dict[str, Any] = {"id": q.id, "columns": columns}
        if page:
            body["data"] = page
        if start + plan.page_rows >= len(q.result.rows):
            q.state = "FINISHED"
            body["stats"] = _stats("FINISHED")
        else:
            body["nextUri"] = self._uri(q, token + 1)
            body["stats"] = _stats("RUNNING")
        return body

    def _lookup(self, method: str, qid: str) -> tuple[int, Any]:
        with self._lock:
            q = self.queries.get(qid)
            if q is None:
                return 404, "Query not found"
            if method == "DELETE":
                q.cancelled = True
                self.deleted.append(qid)
                if q.state not in ("FINISHED", "FAILED"):
                    q.state = "FAILED"
                    q.error = EngineError("Query was killed", "ADMINISTRATIVELY_KILLED",
                                          "USER_ERROR", 65540)
                return 204, ""
            info: dict[str, Any] = {"queryId": qid, "state": q.state, "query": q.sql}
            if q.state == "FAILED" and q.error is not None:
                info["errorCode"] = {"name": q.error.name, "code": q.error.code,
                                     "type": q.error.type}
                info["failureInfo"] = {"message": q.error.message}
            return 200, info


__all__ = ["EngineError", "QueryPlan", "Recorded", "Result", "TrinoProtocolServer"]

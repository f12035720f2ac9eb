"""The service's operations surface: /metrics (Prometheus), a span and a log line per request, and the
X-Request-ID header.

``/metrics`` shows the app's request counters, the engine's recall, model and consolidation metrics and
the store's rows per type, from registries of their own (not prometheus-client's global one), so apps
in one process never share counts. Who may read it is ``settings.metrics``: ``admin`` (the default:
the admin key as a bearer token, as Prometheus' ``authorization`` scrape option sends it), ``open``
(anyone who reaches the port: a private network), ``off`` (no route).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.interfaces.rest.deps import PrincipalDep
from engram.memory import Engram
from engram.observability import HttpMetrics, Telemetry
from engram.observability.metrics import Forward, StoreRows
from engram.observability.request_log import REQUEST_ID_HEADER, log_request, request_id

CLIENT_LEFT = 499  # the status counted for a request whose client went away before any response
UNMATCHED = "unmatched"  # the route label of a path no route matched (a 404): never the path itself
# The method labels; any other token is "OTHER" (the HTTP server takes any: a caller's own would be a series)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


def mount_metrics(app: FastAPI, engram: Engram) -> HttpMetrics:
    """Add /metrics per ``engram.settings.metrics``; returns the request metrics the middleware feeds."""
    http = HttpMetrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Forward(http.registry))
    registry.register(Forward(engram.telemetry.metrics.registry))
    registry.register(StoreRows(lambda: engram.store.stats()["counts"]))
    access = engram.settings.metrics
    if access == "off":
        return http

    def admin_only(principal: PrincipalDep) -> None:
        if not principal.is_admin:
            raise HTTPException(403, "/metrics needs the admin key (ENGRAM_METRICS=open serves it to all)")

    # A sync route: the store's count runs on a worker thread, not the event loop.
    @app.get(
        "/metrics",
        include_in_schema=False,
        dependencies=[Depends(admin_only)] if access == "admin" else [],
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return http


def framework_telemetry_off() -> dict[str, Any]:
    """``FastAPI(**this)``: FastAPI's own OpenTelemetry (0.16x traces requests, records metrics and
    logs through any global provider the process has) left off. Engram's spans are on only with
    settings.otel, and then the Observe middleware makes the request span, with the route template
    and the request id: the framework's would duplicate it and record the raw path (/mcp/{user})."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}  # an older FastAPI: it traces nothing by itself
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}


def route_of(scope: Scope, request: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that served the request (``/v1/memories/{memory_id}``): the one
    FastAPI's router recorded in ``scope`` (its own routes), else the first of ``routes`` that matches
    ``request``, the request as it came (the MCP routes, the static mounts; 405s match partly)."""
    route = scope.get("route")
    if route is None:
        matches = [(r.matches(request)[0], r) for r in routes]
        route = next((r for m, r in matches if m is Match.FULL), None) or next(
            (r for m, r in matches if m is Match.PARTIAL), None
        )
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return UNMATCHED
    return f"{path}/{{path}}" if isinstance(route, Mount) else path


class Observe:
    """Outermost middleware: request id (kept from X-Request-ID when sane), the request span, the
    request metrics and the request log line."""

    def __init__(
        self, app: ASGIApp, http: HttpMetrics, telemetry: Telemetry, routes: Sequence[BaseRoute]
    ) -> None:
        self.app = app
        self.routes = routes
        self.http = http
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent = dict(scope.get("headers", [])).get(REQUEST_ID_HEADER.lower().encode())
        rid = request_id(sent.decode("latin-1") if sent is not None else None)
        scope.setdefault("state", {})["request_id"] = rid  # request.state.request_id (the 500 handler)
        # Any token is a method to the HTTP server: others are one label, not a series each of a
        # caller's choosing (unbounded memory and scrape size).
        method = scope["method"] if scope["method"] in HTTP_METHODS else "OTHER"
        # What the routes match against: the router adds to ``scope`` as it routes (a mount's root path).
        request = {
            "type": "http",
            "path": scope["path"],
            "root_path": scope.get("root_path", ""),
            "method": method,
        }
        status = 0  # until the response starts
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)

        self.http.in_flight.inc()
        with self.telemetry.span(f"HTTP {method}", **{"http.request.method": method}) as span:
            failed = True
            try:
                await self.app(scope, receive, send_with_id)
                failed = False
            finally:
                seconds = time.perf_counter() - start
                # No response: a fault (the outer server-error handler answers 500), else the client left
                # before one was sent (499, as nginx counts it).
                status = status or (500 if failed else CLIENT_LEFT)
                route = route_of(scope, request, self.routes)
                self.http.in_flight.dec()
                self.http.observe(method, route, status, seconds)
                log_request(method, route, status, seconds, rid)
                if span is not None:
                    span.update_name(f"{method} {route}")
                    span.set_attributes(
                        {"http.route": route, "http.response.status_code": status, "engram.request_id": rid}
                    )

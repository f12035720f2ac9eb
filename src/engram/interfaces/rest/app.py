"""create_app: one ASGI app serving the REST API (/v1, docs at /docs), MCP (/mcp, /mcp/{user_id}), the
inspector (/inspector, where / leads), /healthz and /metrics (engram.interfaces.rest.observe)."""

from __future__ import annotations

import codecs
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from mcp.server.transport_security import TransportSecuritySettings
from starlette.exceptions import HTTPException
from starlette.routing import Route, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import __version__
from engram.auth import READ_ONLY, ApiKeys, Principal
from engram.errors import (
    FAILED,
    Conflict,
    EngramError,
    InvalidInput,
    ModelError,
    NotFound,
    PermissionDenied,
    StorageError,
    Unauthenticated,
    public_message,
)
from engram.interfaces.consolidation_runs import ConsolidationRuns
from engram.interfaces.inspector.activity import RecordingMemory
from engram.interfaces.inspector.routes import mount_inspector
from engram.interfaces.inspector.web import ROOT, error_page
from engram.interfaces.mcp import build_mcp_server, http_may_write, http_tenant
from engram.interfaces.rest.deps import known_query
from engram.interfaces.rest.docs import mount_docs
from engram.interfaces.rest.imports import ImportJobs
from engram.interfaces.rest.observe import Observe, framework_telemetry_off, mount_metrics
from engram.interfaces.rest.routes import admin, memories, operations
from engram.interfaces.rest.schemas import HTTP_CODES, error_responses, publish_limits
from engram.limits import MAX_BODY_BYTES, MAX_IMPORT_BYTES, SESSION_ID_PATTERN
from engram.memory import Engram, validate_user_id
from engram.observability.request_log import REQUEST_ID_HEADER
from engram.validation import USER_ID_PATTERN

log = logging.getLogger(__name__)

# The routes that take a whole history, and who may call each: their bodies are read only after that.
IMPORT_ROUTES = {"/v1/import": "user", "/v1/catalog/import": "admin"}
NOT_UTF8 = "the request body must be JSON in UTF-8, without a byte order mark"
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]  # what the MCP SDK allows by default

# One table from our errors to HTTP statuses (most specific first).
ERROR_STATUS: list[tuple[type[EngramError], int]] = [
    (InvalidInput, 422),
    (NotFound, 404),
    (Unauthenticated, 401),
    (PermissionDenied, 403),
    (Conflict, 409),
    (ModelError, 503),
    (StorageError, 503),
    (EngramError, 500),
]


TWO_KEYS = "more than one Authorization header: send one key"


def _error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


def mcp_transport_security(allowed_hosts: list[str]) -> TransportSecuritySettings | None:
    """The MCP SDK's DNS-rebinding guard with the configured hosts added to loopback; None (the SDK's
    own choice: loopback only when bound to loopback) when none are configured."""
    if not allowed_hosts:
        return None
    origins = [f"http://{h}" for h in LOOPBACK_HOSTS]
    origins += [f"{scheme}://{h}" for h in allowed_hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*LOOPBACK_HOSTS, *allowed_hosts],
        allowed_origins=origins,
    )


def create_app(engram: Engram, keys: ApiKeys, *, host: str = "127.0.0.1") -> FastAPI:
    # MCP tool calls land in the inspector's activity log like REST calls (the log exists once
    # mount_inspector below has run, before any request).
    runs = ConsolidationRuns(engram)
    mcp_server = build_mcp_server(
        engram,
        http_tenant,
        lambda user: RecordingMemory(engram, validate_user_id(user), app.state.activity),
        runs,
        http_may_write,
    )
    mcp_app = mcp_server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        host=host,
        transport_security=mcp_transport_security(engram.settings.mcp_allowed_hosts),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Sync routes and tools run on anyio's threads; recalls waiting for a slot hold some of them.
        anyio.to_thread.current_default_thread_limiter().total_tokens = engram.settings.request_threads
        # The token encoder's batch graph, made now: made at an import's first chunk it slowed that
        # import's first answers past a 1 s client timeout (tests/interfaces/test_import_jobs.py).
        prepare = getattr(engram.token_encoder, "prepare_batches", None)
        if prepare is not None:
            await anyio.to_thread.run_sync(prepare)
        async with mcp_server.session_manager.run():
            yield
        app.state.imports.close()
        runs.close()

    app = FastAPI(
        title="Engram",
        summary="Persistent, multi-tenant memory for LLM agents",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # mount_docs serves /docs from local assets instead of a CDN
        redoc_url=None,
        **framework_telemetry_off(),
    )
    app.state.engram = engram
    app.state.keys = keys
    app.state.imports = ImportJobs(engram.settings)  # imports sent with an Idempotency-Key
    app.state.consolidation_runs = runs  # POST /v1/consolidate and MCP's consolidate_memory
    for router in (memories.router, operations.router, admin.router):
        app.include_router(router, dependencies=[Depends(known_query)])
    mount_inspector(app)  # /inspector, and the activity log the memory routes record into
    mount_docs(app)  # /docs with local assets, / -> /inspector
    http_metrics = mount_metrics(app, engram)  # /metrics, per settings.metrics

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, Any]:
        """Liveness: the process answers. It reads nothing: /readyz asks the store."""
        return {"status": "ok", "embedding_model": engram.embedder.name}

    @app.get("/readyz", tags=["health"], responses=error_responses(503))
    def readyz() -> dict[str, Any]:
        """Readiness: the store answers a one-row read; 503 storage_error when it does not."""
        # a PostgreSQL or OpenSearch down left /healthz saying ok (an operator's walk)
        engram.store.find_key("readyz")  # no key hashes to this: an indexed miss
        return {"status": "ok", "store": "ok"}

    @app.exception_handler(EngramError)
    async def engram_error(_: Request, exc: EngramError) -> JSONResponse:
        status = next(code for cls, code in ERROR_STATUS if isinstance(exc, cls))
        return _error(status, exc.code, public_message(exc))

    # the API's paths and their methods
    routes: dict[str, set[str]] = {"/healthz": {"GET"}, "/readyz": {"GET"}}
    for route in [*memories.router.routes, *operations.router.routes, *admin.router.routes]:
        if isinstance(route, APIRoute):
            routes.setdefault(route.path, set()).update(route.methods or ())

    # Starlette's, not FastAPI's subclass: unknown routes (404) and wrong methods (405) raise it too.
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 400:  # FastAPI could not read the body as JSON (not UTF-8, too deep)
            return _error(422, "invalid_input", "the request body could not be read as JSON")
        if exc.status_code == 404 and _in_inspector(request.url.path):  # a person's browser
            return await anyio.to_thread.run_sync(
                error_page, request, 404, "Not found", "No such page in the inspector."
            )
        headers = dict(exc.headers or {})
        documented = allowed_methods(routes, request.url.path) if exc.status_code == 405 else []
        if documented:
            headers["Allow"] = ", ".join(documented)
        return _error(exc.status_code, HTTP_CODES.get(exc.status_code, "error"), str(exc.detail), headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        content_type = request.headers.get("content-type", "")
        errors = exc.errors()[:5]
        problems = [_problem(err, content_type, _body_fields(request)) for err in errors]
        if _in_inspector(request.url.path):  # a person's browser: the inspector's own page
            said = "; ".join(_for_a_person(e) or p for e, p in zip(errors, problems, strict=True))
            return await anyio.to_thread.run_sync(error_page, request, 422, "Not a valid request", said)
        return _error(422, _validation_code(request.url.path, exc.errors()), "; ".join(problems))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback after this; the client gets no server detail. This answer is sent
        # from outside the middleware (Observe), so it carries the request id itself.
        rid = getattr(request.state, "request_id", None)
        return _error(500, "internal_error", FAILED, {REQUEST_ID_HEADER: rid} if rid else None)

    gate = McpGate(mcp_app, keys)
    app.router.routes.append(Route("/mcp", gate, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(Route("/mcp/{user_id}", gate, methods=["GET", "POST", "DELETE"]))
    app.add_middleware(BodyLimit, keys=keys)
    # Outermost: a refused body (413) is counted, logged and given its request id too.
    app.add_middleware(Observe, http=http_metrics, telemetry=engram.telemetry, routes=app.router.routes)
    publish_limits(app, engram.settings)
    return app


def _validation_code(path: str, errors: Sequence[Any]) -> str:
    """``invalid_import`` for a bad record of an import document (the Python API's ImportFileError),
    else ``invalid_input`` (malformed JSON too, as on every route)."""
    imports = path in IMPORT_ROUTES
    records = all(e["loc"][:1] == ("body",) and e["type"] != "json_invalid" for e in errors)
    return "invalid_import" if imports and records else "invalid_input"


def _in_inspector(path: str) -> bool:
    return path == ROOT or path.startswith(ROOT + "/")


def allowed_methods(routes: Mapping[str, set[str]], path: str) -> list[str]:
    """The methods of the resource at this path, from ``routes`` (each documented path's methods):
    those of the path itself when it is one (POST /v1/catalog/import, not GET and DELETE
    /v1/catalog/{memory_id} that also match it), else those of every template it matches. Starlette's
    405 names the first matching route's methods only. Empty outside the API (MCP, the inspector)."""
    if path in routes:
        return sorted(routes[path])
    methods: set[str] = set()
    for template, allowed in routes.items():
        if compile_path(template)[0].match(path):
            methods |= allowed
    return sorted(methods)


class McpGate:
    """Authenticates MCP requests: the bearer key decides the tenant; a user in the path must match it."""

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        principal = await _authenticate(self.keys, key)
        if isinstance(principal, JSONResponse):
            return await principal(scope, receive, send)
        path_user = scope.get("path_params", {}).get("user_id")
        if principal.user_id is None or (path_user is not None and path_user != principal.user_id):
            message = (
                "the admin key has no memory"
                if principal.user_id is None
                else "this key is not for that user"
            )
            return await _error(403, "forbidden", message)(scope, receive, send)
        state = dict(scope.get("state") or {})
        state["engram_user"] = principal.user_id
        state["engram_may_write"] = principal.may_write  # the write tools refuse a read-only key
        inner = {**scope, "path": "/mcp", "raw_path": b"/mcp", "root_path": "", "state": state}
        await self.app(inner, receive, send)


class BodyLimit:
    """Bounds request bodies before any route (or the MCP SDK) sees them, and refuses any that is not
    UTF-8 (UTF-16, a byte order mark).

    Every route takes at most MAX_BODY_BYTES; the import routes take MAX_IMPORT_BYTES, and only from a
    caller whose key may use that route, checked before a byte of the body is read. The body is read
    here, at most its limit, and replayed to the app chunk by chunk as it came: a chunked body declares
    no length, and an error raised while a route or the SDK reads it would surface there as a parse
    failure (400) or a 500, not as 413.
    """

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if [name for name, _ in scope.get("headers", [])].count(b"authorization") > 1:
            # the routes read the first, the MCP SDK the last: a proxy that adds one must not choose
            return await _error(401, "unauthorized", TWO_KEYS)(scope, receive, send)
        limit = MAX_BODY_BYTES
        route_for = IMPORT_ROUTES.get(scope["path"])
        if route_for is not None and scope["method"] == "POST":
            refused = await self._refuse(scope, route_for)
            if refused is not None:
                return await refused(scope, receive, send)
            limit = MAX_IMPORT_BYTES
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await _too_large(limit)(scope, receive, send)
        chunks: list[bytes] = []
        size, head = 0, b""
        utf8 = codecs.getincrementaldecoder("utf-8")()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await _too_large(limit)(scope, receive, send)
            head = (head + chunk)[:3] if len(head) < 3 else head
            try:
                utf8.decode(chunk, final=not message.get("more_body", False))
                # A raw NUL is never in UTF-8 JSON (a string escapes it): it is UTF-16 or 32 without a mark.
                not_utf8 = head.startswith(codecs.BOM_UTF8) or b"\x00" in chunk
            except UnicodeDecodeError:  # UTF-16 or 32, Latin-1...
                not_utf8 = True
            if not_utf8:
                return await _error(422, "invalid_input", NOT_UTF8)(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending = [
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]
        pending.reverse()

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, route_for: str) -> JSONResponse | None:
        """401 or 403 for a caller that may not import here (the route would say the same after
        reading the body); None: the caller may."""
        auth = dict(scope.get("headers", [])).get(b"authorization", b"").decode("latin-1")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        principal = await _authenticate(self.keys, key)
        if isinstance(principal, JSONResponse):
            return principal
        if route_for == "admin" and not principal.is_admin:
            return _error(403, "forbidden", "this route needs the admin key")
        if route_for == "user" and principal.user_id is None:
            return _error(403, "forbidden", "the admin key manages keys and the catalog; use a user key")
        if not principal.may_write:
            return _error(403, "permission_denied", READ_ONLY)  # as a write route says it
        return None


async def _authenticate(keys: ApiKeys, key: str | None) -> Principal | JSONResponse:
    """The key's principal, or the 401 that says why not (expired; missing, unknown or revoked)."""
    try:
        return await anyio.to_thread.run_sync(keys.authenticate, key)
    except Unauthenticated as exc:
        return _error(401, "unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})


def _body_fields(request: Request) -> list[str]:
    """The fields the route's JSON body takes (its model's, by their JSON names); [] when it has none."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    fields = getattr(model, "model_fields", None)
    return [f.alias or name for name, f in fields.items()] if isinstance(fields, dict) else []


def _problem(err: Any, content_type: str, takes: Sequence[str] = ()) -> str:
    """One validation error in our words. FastAPI's own were "[13]: JSON decode error" for malformed
    JSON, and "body: Input should be a valid dictionary ..." for JSON sent without its Content-Type
    (curl -d sends a form's): both now say what to fix."""
    loc, msg = tuple(err.get("loc", ())), err.get("msg")
    if err.get("type") == "json_invalid":
        at = next((f" at character {part}" for part in loc if isinstance(part, int)), "")
        why = (err.get("ctx") or {}).get("error")
        return f"body: malformed JSON{at}" + (f" ({why})" if why else "")
    if loc == ("body",) and "json" not in content_type.lower():
        sent = f"this request's is {content_type}" if content_type else "this request has none"
        return f"body: {msg} (send JSON with Content-Type: application/json; {sent})"
    if err.get("type") == "extra_forbidden" and len(loc) == 2 and takes:  # as MCP names its arguments
        return f"{_where(loc)}: unknown field; this body takes {', '.join(takes)}"
    if err.get("type") == "string_pattern_mismatch":  # pydantic's words quote the regex
        pattern = str((err.get("ctx") or {}).get("pattern", ""))
        return f"{_where(loc)}: {_PATTERN_WORDS.get(pattern, 'not in the form this field takes')}"
    # A validator's ValueError comes back as "Value error, <ours>": the prefix is pydantic's (as in MCP).
    return f"{_where(loc)}: {str(msg).removeprefix('Value error, ')}"


_BOUNDS = {  # pydantic's error types for a number out of range, in a person's words
    "greater_than_equal": "{ge} or more",
    "less_than_equal": "{le} or less",
    "int_parsing": "a whole number",
}


def _for_a_person(err: Any) -> str | None:
    """A bad page number or count in an inspector URL as a person reads it ("page must be 1 or more",
    not pydantic's "query.page: Input should be greater than or equal to 1"), else None."""
    words = _BOUNDS.get(err.get("type", ""))
    loc = tuple(err.get("loc", ()))
    if words is None or len(loc) != 2 or loc[0] != "query":
        return None
    return f"{loc[1]} in the address must be {words.format(**(err.get('ctx') or {}))}"


_PATTERN_WORDS = {
    SESSION_ID_PATTERN: "contains a control character",  # KEY_LABEL_PATTERN too: the same regex
    USER_ID_PATTERN: "must be 1-128 characters: letters, digits and . _ @ : + - (not first)",
}


def _where(loc: Sequence[str | int]) -> str:
    """A validation error's location as the importer names records: ``episodic[1].text``."""
    where = ""
    for part in loc:
        if part != "body":
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where or "body"


def _too_large(limit: int) -> JSONResponse:
    return _error(413, "payload_too_large", f"request body over {limit} bytes")


__all__ = ["create_app"]

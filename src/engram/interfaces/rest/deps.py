"""Dependencies: the Engram instance and the caller, resolved from the bearer key on every request."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from engram.auth import ApiKeys, Principal
from engram.errors import Unauthenticated
from engram.interfaces.consolidation_runs import ConsolidationRuns
from engram.interfaces.inspector.activity import RecordingMemory
from engram.interfaces.rest.imports import ImportJobs
from engram.memory import CatalogAdmin, Engram, UserMemory, validate_user_id

_bearer = HTTPBearer(auto_error=False, description="an Engram API key")


def get_engram(request: Request) -> Engram:
    return cast(Engram, request.app.state.engram)  # app.state is untyped: create_app sets it


def import_jobs(request: Request) -> ImportJobs:
    return cast(ImportJobs, request.app.state.imports)


def consolidation_runs(request: Request) -> ConsolidationRuns:
    return cast(ConsolidationRuns, request.app.state.consolidation_runs)


def get_keys(request: Request) -> ApiKeys:
    return cast(ApiKeys, request.app.state.keys)


def known_query(request: Request) -> None:
    """A query parameter the route does not take is a 422 naming those it does, not ignored:
    ``GET /v1/memories?types=episodic`` listed facts, as if the filter had been applied."""
    takes = _query_names(request.scope.get("route"))
    unknown = [name for name in request.query_params if name not in takes]
    if unknown:
        accepted = ", ".join(takes) or "no query parameters"
        why = f"unknown; this route takes {accepted}"
        raise RequestValidationError(
            [{"type": "unknown_query", "loc": ("query", name[:100]), "msg": why} for name in unknown[:5]]
        )


def _query_names(route: Any) -> tuple[str, ...]:
    """The query parameters a route and its dependencies declare, by the names a URL uses."""
    names: list[str] = []
    pending = [getattr(route, "dependant", None)]
    while pending:
        if (dependant := pending.pop()) is not None:
            names += [field.alias for field in dependant.query_params if field.alias not in names]
            pending += dependant.dependencies
    return tuple(names)


def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    try:
        return get_keys(request).authenticate(credentials.credentials if credentials else None)
    except Unauthenticated as exc:  # why: "key expired", or missing, unknown or revoked
        raise HTTPException(401, str(exc), headers={"WWW-Authenticate": "Bearer"}) from None


def get_user_memory(
    request: Request,
    principal: Annotated[Principal, Depends(get_principal)],
    engram: Annotated[Engram, Depends(get_engram)],
) -> UserMemory:
    """The caller's own memory: the tenant comes from the key, never from the request. What it does is
    recorded in that user's activity log (the inspector's "this turn" view)."""
    if principal.user_id is None:
        raise HTTPException(403, "the admin key manages keys and the catalog; use a user key for memories")
    return RecordingMemory(engram, validate_user_id(principal.user_id), request.app.state.activity)


def get_writer_memory(
    principal: Annotated[Principal, Depends(get_principal)],
    mem: Annotated[UserMemory, Depends(get_user_memory)],
) -> UserMemory:
    """The caller's own memory, for a route that writes or forgets: a read-only key gets 403."""
    principal.require_write()  # PermissionDenied: 403 with the reason
    return mem


def get_admin(
    principal: Annotated[Principal, Depends(get_principal)],
    engram: Annotated[Engram, Depends(get_engram)],
) -> CatalogAdmin:
    if not principal.is_admin:
        raise HTTPException(403, "this route needs the admin key")
    return engram.catalog


EngramDep = Annotated[Engram, Depends(get_engram)]
KeysDep = Annotated[ApiKeys, Depends(get_keys)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
UserMemoryDep = Annotated[UserMemory, Depends(get_user_memory)]
WriterMemoryDep = Annotated[UserMemory, Depends(get_writer_memory)]
AdminDep = Annotated[CatalogAdmin, Depends(get_admin)]
ConsolidationRunsDep = Annotated[ConsolidationRuns, Depends(consolidation_runs)]

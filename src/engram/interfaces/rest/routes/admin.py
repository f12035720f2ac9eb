"""Admin routes: API keys and the shared catalog. They need the admin key."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse

from engram.data_rights import erase_user
from engram.errors import Conflict
from engram.import_records import CatalogRecord
from engram.importer import import_document
from engram.interfaces.rest.deps import (
    AdminDep,
    EngramDep,
    KeysDep,
    PrincipalDep,
    consolidation_runs,
    get_admin,
    import_jobs,
)
from engram.interfaces.rest.schemas import (
    IMPORT_RESPONSES,
    IMPORT_STATUS_RESPONSES,
    MAX_OFFSET,
    CatalogCreate,
    ForgetResponse,
    IdempotencyKey,
    ImportWait,
    JobKey,
    KeyCreate,
    KeyCreated,
    KeyPublic,
    MemoryList,
    UserDeleted,
    error_responses,
)
from engram.limits import MAX_PAGE
from engram.models import CatalogItem, Memory
from engram.transfer import export_user
from engram.validation import USER_ID_PATTERN

NDJSON = "application/x-ndjson"
UserId = Annotated[str, Path(pattern=USER_ID_PATTERN, description="the user whose data this is")]

router = APIRouter(
    prefix="/v1",
    tags=["admin"],
    dependencies=[Depends(get_admin)],
    responses=error_responses(401, 403, 413, 422, 503),
)


@router.post("/keys", status_code=201, response_model=KeyCreated)
def create_key(body: KeyCreate, keys: KeysDep) -> KeyCreated:
    """Create an API key for a user, read-only (``scope: read``) or not, expiring after
    ``expires_in_s`` seconds or never; the key is in this response only."""
    expires_in = None if body.expires_in_s is None else timedelta(seconds=body.expires_in_s)
    key, record = keys.create(body.user_id, body.label, scope=body.scope, expires_in=expires_in)
    return KeyCreated(key=key, **record.__dict__)


@router.get(
    "/admin/users/{user_id}/export",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {}}}, **error_responses(404)},
)
def export_user_data(user_id: UserId, engram: EngramDep) -> StreamingResponse:
    """Everything of one user (a data-rights access request) as JSON Lines in the format of ``engram
    export``: their memories of every type, tombstones and API keys (hashes only), and a trailer that
    counts and checksums them. 404 when the store holds nothing of that user."""
    spool = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed by the stream
    try:
        export_user(engram, user_id, spool)  # NotFound: 404
    except BaseException:
        spool.close()
        raise
    spool.seek(0)

    def lines() -> Iterator[str]:
        with spool:
            yield from spool

    filename = f"engram-user-{hashlib.sha256(user_id.encode()).hexdigest()[:12]}.jsonl"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return StreamingResponse(lines(), media_type=NDJSON, headers=headers)


@router.delete("/admin/users/{user_id}", response_model=UserDeleted, responses=error_responses(409))
def delete_user_data(
    request: Request,
    user_id: UserId,
    engram: EngramDep,
    principal: PrincipalDep,
    confirm: Annotated[str, Query(description="the user id again: a guard against deleting the wrong one")],
) -> UserDeleted:
    """Delete everything of one user for good (a data-rights erasure request): their memories of every
    type, tombstones, consolidation state, API keys and sign-in sessions, on every table and index of
    the store. Their keys stop working at once. Idempotent: a user with nothing left answers 200 with
    nothing deleted. ``confirm`` must repeat the user id (else 409, nothing deleted). Audited in the
    server log (engram.audit), without content."""
    if confirm != user_id:  # 409: each value is valid alone, they disagree with each other
        raise Conflict(
            "confirm must repeat the user id of the path (?confirm=<user_id>); nothing was deleted"
        )
    by = f"admin key {principal.key_id}"
    deleted = erase_user(engram.store, user_id, by=by)  # their keys first: no new request gets in
    # Work already running for them would write after that delete: imports stop at their next chunk,
    # consolidation runs end; then what they wrote meanwhile goes too.
    imports = import_jobs(request).stop_user(user_id)
    runs = consolidation_runs(request).drop_user(user_id)
    if imports or runs:
        deadline = time.monotonic() + engram.settings.erase_wait_s
        for ended in imports:
            ended.wait(max(0.0, deadline - time.monotonic()))
        while any(run.ended_monotonic is None for run in runs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for kind, n in erase_user(engram.store, user_id, by=by).items():
            deleted[kind] = deleted.get(kind, 0) + n
    engram.session_tails.drop_user(user_id)  # no later turn of a reused id quotes theirs
    request.app.state.activity.drop_user(user_id)  # the inspector's log of their recent turns
    return UserDeleted(user_id=user_id, deleted=deleted)


@router.get("/keys", response_model=list[KeyPublic])
def list_keys(keys: KeysDep, user_id: str | None = None) -> list[KeyPublic]:
    return [KeyPublic(**r.__dict__) for r in keys.list(user_id)]


@router.delete("/keys/{key_id}", status_code=204, responses=error_responses(404, 409))
def revoke_key(key_id: str, keys: KeysDep) -> None:
    keys.revoke(key_id)


@router.post("/catalog", status_code=201, response_model=CatalogItem)
def add_catalog_item(body: CatalogCreate, catalog: AdminDep) -> CatalogItem:
    return catalog.add(body.text, title=body.title, metadata=body.metadata)


@router.get("/catalog", response_model=MemoryList)
def list_catalog(
    catalog: AdminDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> MemoryList:
    return MemoryList(data=catalog.list(limit=limit, offset=offset), limit=limit, offset=offset)


@router.get("/catalog/{memory_id}", response_model=CatalogItem, responses=error_responses(404))
def get_catalog_item(memory_id: str, catalog: AdminDep) -> Memory:
    """One catalog item (user keys read it, and their own rows, at GET /v1/memories/{memory_id})."""
    return catalog.get(memory_id)


@router.delete("/catalog/{memory_id}", response_model=ForgetResponse, responses=error_responses(404))
def forget_catalog_item(memory_id: str, catalog: AdminDep) -> ForgetResponse:
    return ForgetResponse(forgotten=catalog.forget(memory_id))


@router.post("/catalog/import", response_model=dict[str, Any], responses=IMPORT_RESPONSES)
def import_catalog(
    request: Request,
    engram: EngramDep,
    items: list[CatalogRecord],
    idempotency_key: IdempotencyKey = None,
    wait: ImportWait = None,
) -> Any:
    """Import catalog items ``[{"title", "text", "metadata"?, "key"?}]``: written are the items not in
    the catalog yet, the rest counted ``skipped``. An invalid list writes nothing. With an
    ``Idempotency-Key`` it runs as a job, as ``POST /v1/import`` does."""

    def work(progress: Callable[[int, int], None]) -> dict[str, Any]:
        return import_document(engram, items, on_progress=progress)

    document = json.dumps([item.model_dump(mode="json") for item in items])
    return import_jobs(request).run("", idempotency_key, document, work, wait)


@router.get(
    "/catalog/import/{key}",
    response_model=dict[str, Any],
    responses=IMPORT_STATUS_RESPONSES,
)
def import_catalog_status(request: Request, key: JobKey, wait: ImportWait = None) -> Any:
    """A catalog import sent with this ``Idempotency-Key``, as ``GET /v1/import/{key}``."""
    return import_jobs(request).status("", key, wait)

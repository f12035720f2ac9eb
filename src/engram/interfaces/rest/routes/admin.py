"""Admin routes: API keys and the shared catalog. They need the admin key."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from engram.import_records import CatalogRecord
from engram.importer import import_document
from engram.interfaces.rest.deps import AdminDep, EngramDep, KeysDep, get_admin, import_jobs
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
    error_responses,
)
from engram.limits import MAX_PAGE
from engram.models import CatalogItem, Memory

router = APIRouter(
    prefix="/v1",
    tags=["admin"],
    dependencies=[Depends(get_admin)],
    responses=error_responses(401, 403, 413, 422, 503),
)


@router.post("/keys", status_code=201, response_model=KeyCreated)
def create_key(body: KeyCreate, keys: KeysDep) -> KeyCreated:
    """Create an API key for a user; the key is in this response only."""
    key, record = keys.create(body.user_id, body.label)
    return KeyCreated(key=key, **record.__dict__)


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

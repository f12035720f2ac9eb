"""Admin routes: API keys and the shared catalog. They need the admin key."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from engram.importer import CatalogRecord
from engram.interfaces.rest.deps import AdminDep, KeysDep, get_admin
from engram.interfaces.rest.schemas import (
    MAX_OFFSET,
    CatalogCreate,
    ForgetResponse,
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


@router.delete("/keys/{key_id}", status_code=204, responses=error_responses(404))
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


@router.post("/catalog/import")
def import_catalog(catalog: AdminDep, items: list[CatalogRecord]) -> dict[str, Any]:
    """Import catalog items ``[{"title", "text", "metadata"?}]``. An invalid list writes nothing;
    sending it again (after a 503, say) writes only what is missing."""
    return catalog.import_json(items)

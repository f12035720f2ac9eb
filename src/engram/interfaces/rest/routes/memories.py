"""A tenant's own memories. Every route takes its tenant from the API key (UserMemoryDep)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from engram.import_records import UserDocument
from engram.importer import import_document
from engram.interfaces.rest.deps import EngramDep, PrincipalDep, UserMemoryDep, WriterMemoryDep, import_jobs
from engram.interfaces.rest.schemas import (
    IMPORT_RESPONSES,
    IMPORT_STATUS_RESPONSES,
    MAX_OFFSET,
    SHED_HEADER,
    CompactRecallResponse,
    ForgetResponse,
    IdempotencyKey,
    ImportWait,
    JobKey,
    Me,
    MemoryCreate,
    MemoryList,
    RecallRequest,
    RecallResponse,
    TurnCreate,
    error_responses,
)
from engram.limits import MAX_PAGE
from engram.models import EpisodicMemory, Memory, ProceduralMemory, SemanticMemory, was_shed

router = APIRouter(prefix="/v1", tags=["memories"], responses=error_responses(401, 403, 413, 422, 503))


@router.get("/me", response_model=Me)
def me(mem: UserMemoryDep, principal: PrincipalDep) -> Me:
    """Whose memory this key opens, and whether it may write."""
    return Me(user_id=mem.user_id, scope="write" if principal.may_write else "read")


@router.post("/turns", status_code=201, response_model=EpisodicMemory)
def remember_turn(body: TurnCreate, mem: WriterMemoryDep) -> EpisodicMemory:
    """Store one user turn verbatim (episodic memory); visible to the very next recall."""
    return mem.remember_turn(body.text, at=body.at, session_id=body.session_id, metadata=body.metadata)


@router.post(
    "/memories",
    status_code=201,
    response_model=SemanticMemory | ProceduralMemory,
    responses=error_responses(404, 409),
)
def write(body: MemoryCreate, mem: WriterMemoryDep) -> SemanticMemory | ProceduralMemory:
    """Write a fact or a playbook; with ``supersedes_id`` it replaces that live row atomically."""
    return mem.write(
        body.text,
        memory_type=body.memory_type,
        fact_type=body.fact_type,
        confidence=body.confidence,
        supporting_episode_ids=body.supporting_episode_ids,
        supersedes_id=body.supersedes_id,
        contradiction=body.contradiction,
        valid_from=body.valid_from,
        valid_to=body.valid_to,
        name=body.name,
        trigger_text=body.trigger_text,
        description=body.description,
        steps=body.steps,
        metadata=body.metadata,
        created_at=body.created_at,
    )


@router.post(
    "/recall",
    response_model=RecallResponse | CompactRecallResponse,
    responses={
        200: {
            "headers": {
                SHED_HEADER: {
                    "description": "sent only when the recall was shed (see shed): the stage skipped",
                    "schema": {"type": "string", "enum": ["rerank"]},
                }
            }
        }
    },
)
def recall(body: RecallRequest, mem: UserMemoryDep, principal: PrincipalDep, eng: EngramDep) -> JSONResponse:
    """Search all memory types and the catalog. Each hit carries its event time, a calibrated
    confidence and (``view="full"``) its score breakdown in ``explain``; ``nothing_confident`` says when
    none reaches the threshold (``min_confidence``, else the default one). Under load the server may
    skip the cross-encoder: ``shed`` is then true, and the ``Engram-Recall-Shed`` header says so. A
    read-only key's recall records no use (use counts rank: counting them is a write)."""
    hits = mem.recall(
        body.query,
        k=body.k,
        memory_types=body.memory_types,
        include_catalog=body.include_catalog,
        include_superseded=body.include_superseded,
        as_of=body.as_of,
        record_use=body.record_use if principal.may_write else False,
        min_confidence=body.min_confidence,
        session_id=body.session_id,
        time_from=body.time_from,
        time_to=body.time_to,
        metadata=body.metadata,
    )
    abstained = body.min_confidence is not None and not hits
    threshold = eng.settings.min_confidence if body.min_confidence is None else body.min_confidence
    said = {"abstained": abstained, "nothing_confident": not any(h.confidence >= threshold for h in hits)}
    shed = was_shed(hits)
    headers = {SHED_HEADER: "rerank"} if shed else None
    if body.view == "compact":  # sent as CompactHit.as_json: without the fields that do not apply
        compact = [h.compact().as_json() for h in hits]
        return JSONResponse({"hits": compact, **said, "shed": shed}, headers=headers)
    full = RecallResponse(hits=hits, **said, shed=shed)
    return JSONResponse(full.model_dump(mode="json"), headers=headers)


@router.get("/memories", response_model=MemoryList)
def list_memories(
    mem: UserMemoryDep,
    memory_type: Annotated[
        Literal["episodic", "semantic", "procedural"],
        Query(
            alias="type",
            description="episodic, semantic (the default) or procedural; the catalog is not a user's "
            "memory: the admin lists it at /v1/catalog",
        ),
    ] = "semantic",
    include_superseded: bool = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> MemoryList:
    """Your memories of one type, newest first, paged."""
    rows = mem.list(memory_type, include_superseded=include_superseded, limit=limit, offset=offset)
    return MemoryList(data=rows, limit=limit, offset=offset, type=memory_type)


@router.get("/memories/{memory_id}", response_model=Memory, responses=error_responses(404))
def get(memory_id: str, mem: UserMemoryDep) -> Memory:
    """One of your memories, or a catalog row."""
    return mem.get(memory_id)


@router.get("/memories/{memory_id}/history", response_model=MemoryList, responses=error_responses(404))
def history(memory_id: str, mem: UserMemoryDep) -> MemoryList:
    """The supersession chain containing this memory, oldest first."""
    rows = mem.history(memory_id)
    return MemoryList(data=rows, limit=len(rows), offset=0)


@router.delete("/memories/{memory_id}", response_model=ForgetResponse, responses=error_responses(404))
def forget(
    memory_id: str,
    mem: WriterMemoryDep,
    revive_retracted: Annotated[
        bool,
        Query(
            description="forgetting a correction makes the fact before it live again, except one a harsh "
            "correction retracted (it was never true); true: that one too"
        ),
    ] = False,
) -> ForgetResponse:
    """Delete one of your memories for good; an audit tombstone without text remains."""
    return ForgetResponse(forgotten=mem.forget(memory_id, revive_retracted=revive_retracted))


@router.post("/import", response_model=dict[str, Any], responses=IMPORT_RESPONSES)
def import_memories(
    request: Request,
    engram: EngramDep,
    mem: WriterMemoryDep,
    document: UserDocument,
    idempotency_key: IdempotencyKey = None,
    wait: ImportWait = None,
) -> Any:
    """Import a user document (see the README) into your own memory: written are the records not in
    it yet, and the rest are counted ``skipped``. An invalid one writes nothing. With an
    ``Idempotency-Key`` it runs as a job: 200 with the report if it ends within ``wait`` seconds, else
    202 with its progress; the same key (sent again, or ``GET /v1/import/{key}``) joins it."""
    user_id = mem.user_id

    def work(progress: Callable[[int, int], None]) -> dict[str, Any]:
        return import_document(engram, document, user_id=user_id, on_progress=progress)

    return import_jobs(request).run(user_id, idempotency_key, document.model_dump_json(), work, wait)


@router.get("/import/{key}", response_model=dict[str, Any], responses=IMPORT_STATUS_RESPONSES)
def import_status(request: Request, mem: UserMemoryDep, key: JobKey, wait: ImportWait = None) -> Any:
    """An import sent with this ``Idempotency-Key``: its report (200) once it ends, else its progress
    (202) after ``wait`` seconds. 404: unknown to this server process (send the import again)."""
    return import_jobs(request).status(mem.user_id, key, wait)

"""What the REST API's answers look like to ``engram.Client``: the envelopes of
engram.interfaces.rest.schemas, read without importing the service (FastAPI, MCP) into every
``import engram``; the rows inside are the engine's own models."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter

from engram.models import CompactHit, EpisodicMemory, Hit, Memory, ProceduralMemory, SemanticMemory, Tombstone


class _Me(BaseModel):
    user_id: str


class _Hits(BaseModel):
    hits: list[Hit]
    shed: bool = False  # the server skipped the cross-encoder under load


class _CompactHits(BaseModel):
    hits: list[CompactHit]
    shed: bool = False


class _Rows(BaseModel):
    data: list[Memory]


class _Forgotten(BaseModel):
    forgotten: Tombstone


ME = TypeAdapter(_Me)
EPISODE = TypeAdapter(EpisodicMemory)
WRITTEN: TypeAdapter[SemanticMemory | ProceduralMemory] = TypeAdapter(
    Annotated[SemanticMemory | ProceduralMemory, Field(discriminator="memory_type")]
)
RECALLED = TypeAdapter(_Hits)
RECALLED_COMPACT = TypeAdapter(_CompactHits)
MEMORY: TypeAdapter[Memory] = TypeAdapter(Memory)
LIST = TypeAdapter(_Rows)
FORGOTTEN = TypeAdapter(_Forgotten)
IMPORTED = TypeAdapter(dict[str, Any])

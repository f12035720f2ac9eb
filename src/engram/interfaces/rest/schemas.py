"""Request and response shapes of the REST API (the rows themselves are engram.models)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.models import Contradiction, FactType, Hit, Memory, MemoryType, Step, Tombstone

MAX_QUERY_CHARS = 4_000  # a recall query is a question, not a document


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnCreate(_Request):
    text: str = Field(description="the user's message, verbatim")
    at: datetime | None = Field(default=None, description="when it was said (default: now)")
    session_id: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)


class MemoryCreate(_Request):
    text: str = Field(default="", description="the fact, or a summary of the playbook")
    memory_type: Literal["semantic", "procedural"] = "semantic"
    fact_type: FactType = "identity"
    confidence: float = Field(default=1.0, ge=0, le=1)
    supporting_episode_ids: list[str] = Field(default_factory=list, max_length=100)
    supersedes_id: str | None = Field(default=None, description="id of the live row this one replaces")
    contradiction: Contradiction | None = Field(
        default=None, description="natural: the world changed; harsh: the old fact was never true"
    )
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    name: str | None = Field(default=None, description="playbook name (procedural)")
    trigger_text: str = ""
    description: str = ""
    steps: list[Step] = Field(default_factory=list, max_length=100)
    metadata: dict[str, Any] = Field(default_factory=dict)


class RecallRequest(_Request):
    query: str = Field(max_length=MAX_QUERY_CHARS)
    k: int = Field(default=10, ge=1, le=100)
    memory_types: list[MemoryType] | None = None
    include_catalog: bool = True
    include_superseded: bool = False
    as_of: datetime | None = Field(
        default=None,
        description="the present that time decay measures from (default: now): replays, audits; "
        "such a recall records no use",
    )


class CatalogCreate(_Request):
    text: str
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


class KeyCreate(_Request):
    user_id: str
    label: str = Field(default="", max_length=200)


class RecallResponse(BaseModel):
    hits: list[Hit]


class MemoryList(BaseModel):
    data: list[Memory]
    limit: int
    offset: int


class ForgetResponse(BaseModel):
    forgotten: Tombstone


class KeyPublic(BaseModel):
    id: str
    user_id: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None = None


class KeyCreated(KeyPublic):
    key: str = Field(description="shown once; only its hash is stored")


class ErrorBody(BaseModel):
    error: str = Field(description="stable machine-readable code")
    message: str

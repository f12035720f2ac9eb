"""What the agent needs of a user's memory: the embedded ``UserMemory`` and the REST ``engram.Client``
both have these methods, so one agent works on either."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from engram.models import (
    Contradiction,
    EpisodicMemory,
    FactType,
    Hit,
    Memory,
    MemoryType,
    ProceduralMemory,
    Step,
    Tombstone,
)
from engram.recall_filter import MetadataValue


class MemoryHandle(Protocol):
    def remember_turn(
        self,
        text: str,
        at: datetime | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> EpisodicMemory: ...

    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        *,
        min_confidence: float | None = None,
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> list[Hit]: ...

    def record_outcome(self, playbook_id: str, success: bool) -> ProceduralMemory: ...

    def write(
        self,
        text: str,
        memory_type: MemoryType = "semantic",
        *,
        fact_type: FactType = "identity",
        confidence: float = 1.0,
        supporting_episode_ids: Sequence[str] = (),
        supersedes_id: str | None = None,
        contradiction: Contradiction | None = None,
        name: str | None = None,
        trigger_text: str = "",
        description: str = "",
        steps: Iterable[Step | Mapping[str, Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Memory: ...

    def get(self, memory_id: str) -> Memory: ...

    def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone: ...

    def list(
        self,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> Sequence[Memory]: ...

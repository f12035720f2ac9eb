"""Mapping between Memory models and flat storage rows, shared by every SQL backend.

Fields that change after the write are real columns; the other type-specific fields travel in one
``attrs`` JSON document, so adding a field to a model needs no schema migration.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from engram.models import (
    CatalogItem,
    EpisodicMemory,
    Memory,
    ProceduralMemory,
    SemanticMemory,
    Step,
    search_text_of,
)

_MEMORY: TypeAdapter[Memory] = TypeAdapter(Memory)
_MODEL_BY_TYPE: dict[str, type[Memory]] = {
    "episodic": EpisodicMemory,
    "semantic": SemanticMemory,
    "procedural": ProceduralMemory,
    "catalog": CatalogItem,
}

# Model fields stored as their own columns (the rest of a model's fields go to ``attrs``).
_COLUMNS = (
    "last_used_at",
    "use_count",
    "success_count",
    "failure_count",
    "last_success_at",
    "supersedes",
    "superseded_by",
    "superseded_at",
    "retracted",
)
# Every column a backend selects to rebuild a Memory, in this order.
MEMORY_COLUMNS = (
    "id",
    "owner",
    "memory_type",
    "text",
    "created_at",
    "event_at",
    "metadata",
    "attrs",
    *_COLUMNS,
)
_COMMON = {"id", "text", "user_id", "created_at", "metadata", "memory_type", "timestamp"}
_TIME_COLUMNS = {"created_at", "event_at", "last_used_at", "last_success_at", "superseded_at"}


def keyword_text_of(memory: Memory) -> str:
    """The text BM25 indexes: the search text, and for an episode the context it replied to first.

    An elliptic reply ("Yeah, it was amazing!") is found by the words of the turn it answers; the
    stored text stays verbatim. Measured on LoCoMo dev: see docs/benchmarks.md.
    """
    text = search_text_of(memory)
    context = getattr(memory, "context", None)
    return f"{context}\n{text}" if context else text


def without_context(memory: Memory) -> Memory:
    """The episode as if it had no context: what remains once the turn it quoted is forgotten."""
    return memory.model_copy(update={"context": None, "context_id": None})


def memory_to_row(memory: Memory) -> dict[str, Any]:
    data = memory.model_dump(mode="json")
    row: dict[str, Any] = {
        "id": memory.id,
        "memory_type": memory.memory_type,
        "text": memory.text,
        "created_at": memory.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "event_at": data.get("timestamp"),
        "metadata": json.dumps(data["metadata"]),
    }
    for column in _COLUMNS:
        if column in data:
            row[column] = data[column]
    if "retracted" in row:
        row["retracted"] = int(row["retracted"])
    attrs = {k: v for k, v in data.items() if k not in _COMMON and k not in _COLUMNS}
    row["attrs"] = json.dumps(attrs)
    return row


def memory_from_row(row: dict[str, Any]) -> Memory:
    memory_type = row["memory_type"]
    data: dict[str, Any] = {
        "id": row["id"],
        "memory_type": memory_type,
        "text": row["text"],
        "user_id": row["owner"] or None,
        "created_at": row["created_at"],
        "metadata": _loads(row["metadata"]),
        **_loads(row["attrs"]),
    }
    if memory_type == "episodic":
        data["timestamp"] = row["event_at"]
    fields = _MODEL_BY_TYPE[memory_type].model_fields
    for column in _COLUMNS:
        if column in fields:
            data[column] = row[column]
    if "retracted" in data:
        data["retracted"] = bool(data["retracted"])
    for key in _TIME_COLUMNS & data.keys():
        if isinstance(data[key], str):
            data[key] = datetime.fromisoformat(data[key])
    return _MEMORY.validate_python(data)


def _loads(value: Any) -> Any:
    if isinstance(value, dict):  # drivers that decode JSON columns themselves (psycopg)
        return value
    return json.loads(value) if value else {}


def merged_provenance(attrs: Any, episode_ids: Sequence[str]) -> str:
    """A fact's attrs JSON with ``episode_ids`` added to its supporting episodes (no duplicates)."""
    data = _loads(attrs)
    known = list(data.get("supporting_episode_ids", []))
    data["supporting_episode_ids"] = known + [i for i in episode_ids if i not in known]
    return json.dumps(data)


def refined_attrs(attrs: Any, refined_steps: Sequence[Step] | None) -> str:
    """A playbook's attrs JSON after a failure: new refined steps bump its version."""
    data = _loads(attrs)
    if refined_steps:
        data["refined_steps"] = [s.model_dump(mode="json") for s in refined_steps]
        data["version"] = int(data.get("version", 1)) + 1
    return json.dumps(data)

"""The documents of the OpenSearch store's memories index: built from a Memory, read back as one."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from engram.models import Memory, Vectors, event_time
from engram.recall_filter import metadata_term, metadata_terms
from engram.storage._rows import keyword_text_of, memory_from_row, memory_to_row, without_context
from engram.storage._statements import WAITING
from engram.storage.base import SearchFilter

ROW_SOURCE: dict[str, Any] = {
    "excludes": ["embedding", "tokens", "search_text"]
}  # what a Memory is built from
PAGE = 1000  # documents a search returns at once when a caller asks for more
_rid_lock = threading.Lock()
_last_rid = [0]


def next_rid() -> int:
    """A write-order number: nanoseconds since the epoch, strictly increasing in this process."""
    with _rid_lock:
        _last_rid[0] = max(_last_rid[0] + 1, time.time_ns())
        return _last_rid[0]


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def memory(source: Mapping[str, Any]) -> Memory:
    return memory_from_row(dict(source))


def document(row: Memory, owner: str, vector: Vectors, tokens: bytes | None) -> dict[str, Any]:
    """The stored document of a new row (every field present: memory_from_row reads them all)."""
    values = memory_to_row(row)
    attrs = json.loads(values["attrs"])
    doc: dict[str, Any] = {
        "id": row.id,
        "rid": next_rid(),
        "owner": owner,
        "memory_type": row.memory_type,
        "text": row.text,
        "search_text": keyword_text_of(row),
        "created_at": values["created_at"],
        "event_at": values.get("event_at"),
        "metadata": json.loads(values["metadata"]),
        "attrs": attrs,
        "context_id": attrs.get("context_id"),
        "session_id": attrs.get("session_id"),
        "event_time": iso(event_time(row)),
        "metadata_terms": metadata_terms(row.metadata),
        "embedding": [float(x) for x in vector],
        "consolidated": WAITING,
    }
    for column in ("last_used_at", "last_success_at", "supersedes", "superseded_by", "superseded_at"):
        doc[column] = values.get(column)
    for column in ("use_count", "success_count", "failure_count", "retracted"):
        doc[column] = values.get(column) or 0
    doc.update(tokens_field(tokens))
    return doc


def tokens_field(blob: bytes | None) -> dict[str, Any]:
    return {
        "tokens": base64.b64encode(blob).decode() if blob is not None else None,
        "has_tokens": blob is not None,
    }


def narrowing(where: SearchFilter) -> list[dict[str, Any]]:
    """The recall filter as query clauses on the fields ``document`` derives (engram.recall_filter)."""
    narrow = where.narrow
    clauses: list[dict[str, Any]] = []
    if narrow.session_id is not None:
        clauses += [{"term": {"memory_type": "episodic"}}, {"term": {"session_id": narrow.session_id}}]
    span = {op: iso(at) for op, at in (("gte", narrow.time_from), ("lt", narrow.time_to)) if at is not None}
    if span:
        clauses.append({"range": {"event_time": span}})
    for key, value in narrow.metadata:
        # a checked filter's pair always has a term (its key and value are far below the bound)
        clauses.append({"term": {"metadata_terms": metadata_term(key, value) or ""}})
    return clauses


def bare_fields(row: Memory) -> dict[str, Any]:
    """A new row's fields once the turn it quotes is gone: no context, nor its words."""
    bare = without_context(row)
    return {
        "attrs": json.loads(memory_to_row(bare)["attrs"]),
        "context_id": None,
        "search_text": keyword_text_of(bare),
    }

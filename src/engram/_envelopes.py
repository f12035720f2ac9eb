"""What the REST API's requests and answers look like to ``engram.Client``: the envelopes of
engram.interfaces.rest.schemas, read without importing the service (FastAPI, MCP) into every
``import engram`` (the rows inside are the engine's own models), and the client's wire helpers."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import BaseModel, Field, TypeAdapter

from engram.errors import InvalidInput, NotFound
from engram.models import CompactHit, EpisodicMemory, Hit, Memory, ProceduralMemory, SemanticMemory, Tombstone
from engram.validation import aware


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
PLAYBOOK = TypeAdapter(ProceduralMemory)
IMPORTED = TypeAdapter(dict[str, Any])
_NOT_FOUND = re.compile(r"^(?P<what>\w+) (?P<id>'.*'|\".*\") not found$", re.DOTALL)


def _not_found(message: str) -> NotFound | None:
    """NotFound as the handle raises it (``memory 'x' not found``, with ``memory_id`` set), from the
    service's message; None when the message names no row."""
    match = _NOT_FOUND.match(message)
    if match is None:
        return None
    try:
        return NotFound(str(ast.literal_eval(match["id"])), match["what"])
    except (ValueError, SyntaxError):
        return None


def _memory_path(memory_id: object, collection: str = "memories") -> str:
    """The route of one row (under ``/v1/{collection}/``). The handle looks up ``str(memory_id)``
    whatever it is given; here every character is escaped (the dots too: "." or ".." would be read as
    path steps), so the id stays one path segment."""
    segment = str(memory_id)
    if not segment or "/" in segment:  # no id has either; the handle says NotFound too
        raise NotFound(segment)
    return f"/v1/{collection}/" + quote(segment, safe="").replace(".", "%2E")


def _iso(at: datetime | None) -> str | None:
    """A timestamp as the handle reads it (a naive one is UTC; anything else InvalidInput), in ISO."""
    at_utc = aware(at)
    return None if at_utc is None else at_utc.isoformat()


def _listed(values: Iterable[Any]) -> list[Any]:
    """A sequence argument as the handle takes it: one string is one item, not its characters."""
    return [values] if isinstance(values, str) else list(values)


def _json(body: Any) -> bytes:
    """The request body. ASCII-escaped, so a lone surrogate reaches the service (which refuses it as the
    handle does) instead of failing to encode here; NaN and infinity are not JSON."""
    try:
        return json.dumps(body, allow_nan=False).encode("ascii")
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"the request cannot be sent as JSON: {exc}") from None

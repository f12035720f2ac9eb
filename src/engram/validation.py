"""Checks on what callers pass in, shared by the facade's handles and the modules below it.

The facade, auth, the importer and the HTTP client all refuse the same bad input with the same
InvalidInput; they import these checks from here rather than from the facade, so nothing below the
facade depends on it. Pure functions over models and errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from engram.errors import InvalidInput
from engram.limits import MAX_PAGE_BOUND, MAX_SESSION_ID_CHARS
from engram.models import MEMORY_TYPES, MemoryType

# Also the REST schema's pattern, so the OpenAPI document shows it.
USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:+\-]{0,127}$"
_USER_ID = re.compile(USER_ID_PATTERN)

RowT = TypeVar("RowT", bound=BaseModel)


def validate_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not _USER_ID.match(user_id):
        raise InvalidInput("user_id must be 1-128 characters: letters, digits and . _ @ : + - (not first)")
    return user_id


def aware(at: datetime | None) -> datetime | None:
    """Timestamps are stored in UTC; a naive datetime is taken to be UTC already."""
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise InvalidInput(f"expected a datetime, got {type(at).__name__}")
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 has no UTC equivalent
        raise InvalidInput(f"{at.isoformat()} is out of the representable range") from None


def check_types(memory_types: Iterable[Any]) -> list[MemoryType]:
    """The memory types asked for (one name or several), each one of MEMORY_TYPES."""
    if isinstance(memory_types, str):
        memory_types = [memory_types]
    result = list(memory_types)
    for t in result:
        if t not in MEMORY_TYPES:
            raise InvalidInput(f"unknown memory_type {t!r}; expected one of {MEMORY_TYPES}")
    return result


def check_page(limit: int, offset: int) -> None:
    """The paging every store enforces on a list: 1 <= limit and 0 <= offset, both <= 10^9."""
    if not (1 <= limit <= MAX_PAGE_BOUND and 0 <= offset <= MAX_PAGE_BOUND):
        raise InvalidInput(f"limit must be in [1, {MAX_PAGE_BOUND}] and offset in [0, {MAX_PAGE_BOUND}]")


def build_row(model: type[RowT], **fields: Any) -> RowT:
    """Construct a row model, turning pydantic's errors into InvalidInput."""
    try:
        return model(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInput(problems) from None


def check_metadata_size(metadata: Mapping[str, Any], max_chars: int) -> None:
    """Refuse metadata whose compact JSON is over ``max_chars`` characters (the store's
    ``max_metadata_chars``), or that JSON cannot hold: metadata is notes about a memory, bounded like
    its text, and a row is refused before anything is embedded."""
    try:
        size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError):
        raise InvalidInput("metadata must be a JSON object (strings, numbers, lists, objects)") from None
    if size > max_chars:
        raise InvalidInput(f"metadata is {size} characters as JSON; the limit is {max_chars}")


def check_session_id(session_id: object) -> None:
    """A turn's session_id: None, or a string of at most MAX_SESSION_ID_CHARS characters."""
    if session_id is not None and not isinstance(session_id, str):
        raise InvalidInput("session_id must be a string")
    if session_id is not None and len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidInput(f"session_id is {len(session_id)} characters; the limit is {MAX_SESSION_ID_CHARS}")

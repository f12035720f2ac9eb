"""Checks on what callers pass in, shared by the facade's handles and the modules below it.

The facade, auth, the importer and the HTTP client all refuse the same bad input with the same
InvalidInput; they import these checks from here rather than from the facade, so nothing below the
facade depends on it. Pure functions over models and errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from engram.errors import InvalidInput
from engram.limits import MAX_AHEAD_S, MAX_PAGE_BOUND, MAX_RECALL_K, MAX_SESSION_ID_CHARS, MAX_TITLE_CHARS
from engram.models import MEMORY_TYPES, MemoryType, check_text

# Also the REST schema's pattern, so the OpenAPI document shows it.
USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:+\-]{0,127}$"
_USER_ID = re.compile(USER_ID_PATTERN)

RowT = TypeVar("RowT", bound=BaseModel)


def validate_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not _USER_ID.fullmatch(user_id):
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


def check_turn_time(
    at: datetime | None, what: str = "at", rule: str = "a turn is said now or before"
) -> datetime | None:
    """A turn's time (``aware``), refused when it is more than MAX_AHEAD_S after the server's clock; so
    is a row's ``created_at`` (``rule`` says why), which would lead "newest first" lists for ever and
    outrank every later turn that replaces it."""
    at = aware(at)
    if at is not None and at > datetime.now(UTC) + timedelta(seconds=MAX_AHEAD_S):
        raise InvalidInput(f"{what} {at.isoformat()} is in the future: {rule} (a clock or time zone off?)")
    return at


def items_of(value: object, what: str, text_is_one: bool = False) -> list[Any]:
    """``value`` as a list when it is a list, tuple or other iterable of items; a string is one item
    with ``text_is_one`` (ids, as the Client sends them), else refused, as are bytes and a mapping
    (iterated, "epi_x" was looked up as "e", "p", ...)."""
    if text_is_one and isinstance(value, str):
        return [value]
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a list, not {type(value).__name__} {value!r:.60}")
    return list(value)


def check_types(memory_types: Iterable[Any]) -> list[MemoryType]:
    """The memory types asked for (one name or several), each one of MEMORY_TYPES."""
    if isinstance(memory_types, str):
        memory_types = [memory_types]
    result = list(memory_types)
    for t in result:
        if t not in MEMORY_TYPES:
            raise InvalidInput(f"unknown memory_type {t!r}; expected one of {', '.join(MEMORY_TYPES)}")
    return result


def check_k(k: object, most: int = MAX_RECALL_K) -> None:
    """A recall's ``k``: a Python int in [1, ``most``] (not True, not 5.0), in the embedded API
    and the Client alike (the service reads JSON's 5.0 as 5, as JSON Schema's integer allows); the
    Client passes the service's bound, so its message states the range it really has."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= most:
        raise InvalidInput(f"k must be an integer in [1, {most}]")


def check_recall_flags(include_catalog: object, include_superseded: object, record_use: object) -> None:
    """Booleans, as REST and MCP take them ("no" is truthy); ``record_use`` may be None (the default)."""
    for name, flag in (("include_catalog", include_catalog), ("include_superseded", include_superseded)):
        if not isinstance(flag, bool):
            raise InvalidInput(f"{name} must be true or false")
    if record_use is not None and not isinstance(record_use, bool):
        raise InvalidInput("record_use must be true, false or None")


def check_page(limit: int, offset: int) -> None:
    """The paging every store enforces on a list: 1 <= limit and 0 <= offset, both <= 10^9, integers
    (``limit=True`` was a page of one)."""
    if any(isinstance(n, bool) or not isinstance(n, int) for n in (limit, offset)):
        raise InvalidInput("limit and offset must be integers")
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


MAX_METADATA_DEPTH = 32  # nesting past this is no annotation, and each level costs recursion somewhere


def check_metadata(metadata: object) -> dict[str, Any]:
    """``metadata`` if JSON holds it exactly, else InvalidInput naming the first value that it cannot
    hold: every key a string; every value null, a boolean, an integer, a finite float, a string of
    valid Unicode, a list or an object of the same, at most MAX_METADATA_DEPTH deep. What a store would
    change (a set or tuple read back as a list, NaN) or fail on (a lone surrogate, a NUL character in
    PostgreSQL's jsonb) is refused before anything is embedded or written. None is no metadata; any
    other mapping is copied into a dict."""
    if metadata is None:
        return {}
    if isinstance(metadata, Mapping) and not isinstance(metadata, dict):
        metadata = dict(metadata)
    if not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a JSON object, not {type(metadata).__name__}")
    pending: list[tuple[str, object, int]] = [("metadata", metadata, 0)]
    while pending:
        where, value, depth = pending.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidInput(f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels")
        if value is None or isinstance(value, bool | int):
            continue
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise InvalidInput(f"{where} is {value}, which JSON cannot hold: use a finite number or null")
        elif isinstance(value, str):
            if not _utf8(value):
                raise InvalidInput(f"{where} is not valid Unicode (it contains a lone surrogate)")
            if "\x00" in value:  # PostgreSQL's jsonb cannot hold it
                raise InvalidInput(f"{where} contains a NUL character (U+0000)")
        elif isinstance(value, list):
            pending += [(f"{where}[{i}]", item, depth + 1) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidInput(f"{where} has the key {key!r}: JSON keys are strings")
                if not _utf8(key) or "\x00" in key:
                    raise InvalidInput(f"{where} has a key that is not valid Unicode or holds a NUL")
                pending.append((f"{where}.{key}", item, depth + 1))
        else:
            raise InvalidInput(
                f"{where} is a {type(value).__name__}, which JSON cannot hold as it is: use null, a "
                "boolean, a number, a string, a list or an object"
            )
    return metadata


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_session_id(session_id: object, what: str = "session_id") -> None:
    """A turn's session_id: None, or an id of at most MAX_SESSION_ID_CHARS characters that shows
    something, is valid Unicode and holds no control character. A lone surrogate stored once made every
    later `engram export` fail (the file is UTF-8), and a NUL the move to PostgreSQL."""
    if session_id is None:
        return
    if not isinstance(session_id, str):
        raise InvalidInput(f"{what} must be a string")
    check_text(session_id, what, MAX_SESSION_ID_CHARS)
    if _CONTROL.search(session_id):
        raise InvalidInput(f"{what} contains a control character")


def check_storable(value: str | None, what: str) -> None:
    """What every backend and an export can hold: no NUL (PostgreSQL) and no lone surrogate (UTF-8). For
    rows written before their field was checked as text (``import --all`` moves them as they are)."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} is not valid Unicode (it contains a lone surrogate)") from None
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character (U+0000)")


def check_title(title: object, what: str = "title") -> str:
    """A catalog row's title: empty, or text as ``check_text`` takes it, of at most MAX_TITLE_CHARS."""
    if title is None or title == "":
        return ""
    return check_text(title, what, MAX_TITLE_CHARS)


def check_applies(memory_type: str, fact: Mapping[str, object], playbook: Mapping[str, object]) -> None:
    """Refuse the fields of the other type that were given (not None, empty or the default), rather
    than drop them: an agent that forgot ``memory_type="procedural"`` would lose its playbook's steps.
    ``fact``: fact_type, confidence, supporting_episode_ids, valid_from, valid_to as passed;
    ``playbook``: name, trigger_text, description, steps."""
    defaults: dict[str, object] = {"fact_type": "identity", "confidence": 1.0}
    other = fact if memory_type == "procedural" else playbook
    given = [k for k, v in other.items() if v not in (None, "", [], ()) and v != defaults.get(k)]
    if given:
        kind = "a fact's" if memory_type == "procedural" else "a playbook's (memory_type='procedural')"
        raise InvalidInput(f"{', '.join(given)}: {kind}, not a {memory_type} memory's; nothing was written")

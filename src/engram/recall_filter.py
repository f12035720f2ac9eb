"""What a recall may return beyond memory type and state: one session, a range of event time, and
metadata equality. Every backend applies it inside both search legs (``storage.base.SearchFilter``),
before the legs cut their candidates, so a filtered recall still finds ``k`` rows when ``k`` match.

* ``session_id``: the turns of that session only (facts, playbooks and catalog rows have no session).
* ``time_from`` (inclusive) .. ``time_to`` (exclusive): on the row's event time (``models.event_time``:
  a turn's timestamp, a fact's ``valid_from`` else when it was stored, any other row's creation), so
  two adjacent ranges never both return a row; an empty range matches nothing. SQLite (julianday)
  and OpenSearch (a ``date`` field) compare to the millisecond, PostgreSQL to the microsecond.
* ``metadata``: every pair must equal the row's top-level metadata value of that key. Values are
  scalars (a string, a boolean, a finite number); numbers compare by value (1 equals 1.0), a boolean
  never equals a number, and a list or object stored under the key matches nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field

from engram.errors import InvalidInput
from engram.limits import (
    MAX_METADATA_FILTER_KEYS,
    MAX_METADATA_FILTER_VALUE_CHARS,
    MAX_NAME_CHARS,
    MAX_SESSION_ID_CHARS,
)

MetadataValue = str | bool | int | float
MetadataKey = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]

# The same as the service's request schemas take it (REST, MCP): strict, a boolean before the numbers,
# every number within ±2**53, the schema saying so: an integer past it was read as the float nearest it,
# which then matched another stored integer (an outside review: ...891 found the row of ...890).
MetadataScalar = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(strict=True, ge=-(2**53), le=2**53)]
    | Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-(2**53), le=2**53)]
    | Annotated[str, Field(strict=True, max_length=MAX_METADATA_FILTER_VALUE_CHARS)]
)
_SAFE_INT = 2**53  # past this a JSON number is not an exact integer in every engine (nor in JavaScript)
# A metadata term longer than this (UTF-16 units, as Java counts) is not indexed by OpenSearch: a keyword
# term must stay under 32 KiB, and no filter value is this long.
MAX_TERM_UNITS = 8_000


@dataclass(frozen=True)
class RecallFilter:
    """A checked filter (``recall_filter`` builds one); the empty one lets every row through."""

    session_id: str | None = None
    time_from: datetime | None = None  # UTC, inclusive
    time_to: datetime | None = None  # UTC, exclusive
    metadata: tuple[tuple[str, MetadataValue], ...] = ()

    @property
    def narrows(self) -> bool:
        return bool(self.session_id is not None or self.time_from or self.time_to or self.metadata)


NO_FILTER = RecallFilter()


def recall_filter(
    session_id: object = None, time_from: object = None, time_to: object = None, metadata: object = None
) -> RecallFilter:
    """The filter of a recall's arguments, or InvalidInput naming what is wrong."""
    if session_id is not None and (
        not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID_CHARS
    ):
        raise InvalidInput(f"session_id must be a string of 1 to {MAX_SESSION_ID_CHARS} characters")
    start, end = _utc(time_from, "time_from"), _utc(time_to, "time_to")  # an empty range matches nothing
    if start is not None and end is not None and start > end:  # inverted: a caller's mistake
        raise InvalidInput(f"time_from ({start.isoformat()}) is after time_to ({end.isoformat()})")
    pairs: tuple[tuple[str, MetadataValue], ...] = ()
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidInput("metadata must be an object of keys to values (strings, numbers, booleans)")
        if len(metadata) > MAX_METADATA_FILTER_KEYS:
            raise InvalidInput(
                f"metadata has {len(metadata)} keys; a filter has at most {MAX_METADATA_FILTER_KEYS}"
            )
        pairs = tuple(sorted((_key(k), _scalar(k, v)) for k, v in metadata.items()))
    return RecallFilter(session_id, start, end, pairs)


def _utc(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a date-time")
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"{name} is out of the representable range") from None


def _key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_NAME_CHARS or not _utf8(key):
        raise InvalidInput(f"a metadata filter key must be a string of 1 to {MAX_NAME_CHARS} characters")
    return key


def _scalar(key: str, value: object) -> MetadataValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > _SAFE_INT:
            raise InvalidInput(f"metadata.{key}: integers in a filter are within ±2**53")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > _SAFE_INT:
            raise InvalidInput(f"metadata.{key}: a number in a filter is finite, within ±2**53")
        return value
    if isinstance(value, str):
        if len(value) > MAX_METADATA_FILTER_VALUE_CHARS or not _utf8(value):
            raise InvalidInput(
                f"metadata.{key}: a string in a filter is valid Unicode of at most "
                f"{MAX_METADATA_FILTER_VALUE_CHARS} characters"
            )
        return value
    raise InvalidInput(f"metadata.{key}: a filter value is a string, a number or a boolean")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def metadata_term(key: str, value: object) -> str | None:
    """One metadata pair as OpenSearch indexes it (a keyword), the same for a row's pair and a
    filter's: the key's length first, so no key and value can spell another pair; numbers by value
    (an integral float as its integer). None for what no filter matches (null, a list, an object)."""
    if isinstance(value, bool):
        tagged = f"b:{'true' if value else 'false'}"
    elif isinstance(value, int):
        tagged = f"n:{value}"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        tagged = f"n:{int(value)}" if value.is_integer() and abs(value) < _SAFE_INT else f"n:{value!r}"
    elif isinstance(value, str):
        tagged = f"s:{value}"
    else:
        return None
    term = f"{_units(key)}:{key}{tagged}"
    return term if _units(term) <= MAX_TERM_UNITS else None


def metadata_terms(metadata: Mapping[str, Any]) -> list[str]:
    """The terms of a row's top-level scalar metadata (``metadata_term``)."""
    return [t for k, v in metadata.items() if (t := metadata_term(k, v)) is not None]


def _units(text: str) -> int:
    """Java's String.length(): UTF-16 code units (the OpenSearch migration's script counts this way)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2

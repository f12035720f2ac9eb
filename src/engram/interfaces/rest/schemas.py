"""Request and response shapes of the REST API (the rows themselves are engram.models).

Requests are strict: ``"k": true`` or ``"k": "5"`` is refused, not read as 1 or 5, and a timestamp is an
ISO 8601 string, never a number of seconds. Their JSON Schema states what the server accepts, and every
error response is documented with the one error body the server sends.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from engram.interfaces.rest.imports import MAX_KEY_CHARS, ImportRunning
from engram.interfaces.vocabulary import MAX_SESSION_ID_CHARS
from engram.models import (
    MAX_LINE_CHARS,
    MAX_NAME_CHARS,
    MAX_STEPS,
    CompactHit,
    Contradiction,
    FactType,
    Hit,
    IsoDatetime,
    JsonInt,
    Memory,
    MemoryType,
    RecallView,
    StrictStep,
    Tombstone,
)
from engram.settings import DEFAULT_MAX_TEXT_CHARS
from engram.validation import MAX_PAGE_BOUND, USER_ID_PATTERN

MAX_QUERY_CHARS = 4_000  # a recall query is a question, not a document
MAX_OFFSET = MAX_PAGE_BOUND  # far past any tenant's rows; keeps OFFSET inside every backend's integers
VISIBLE = "must contain at least one visible character (letter, digit, punctuation or symbol)"


def _text(description: str, *, max_chars: int = DEFAULT_MAX_TEXT_CHARS) -> Any:
    """A required text field. Its maximum is the store's ``max_text_chars``, enforced by the engine
    (the schema shows the default), so it is documented here and not checked twice."""
    return Field(
        min_length=1, description=f"{description}; {VISIBLE}", json_schema_extra={"maxLength": max_chars}
    )


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TurnCreate(_Request):
    text: str = _text("the user's message, verbatim")
    at: IsoDatetime | None = Field(default=None, description="when it was said (default: now)")
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID_CHARS)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="free-form, kept verbatim; two keys have a meaning: assistant_context (the assistant "
        "message this turn replied to: searched with the turn, never made a fact) and speaker (who said "
        "it, in a conversation of several people: the turn is searched as 'Speaker: text', and a recall "
        "that names them ranks it up)",
    )


class MemoryCreate(_Request):
    # What each type needs, in the schema too: a fact its text, a playbook its name.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"memory_type": {"const": "procedural"}}, "required": ["memory_type"]},
            "then": {"required": ["name"]},
            "else": {"required": ["text"], "properties": {"text": {"minLength": 1}}},
        }
    )

    text: str = Field(
        default="",
        description=f"the fact (required, {VISIBLE}), or a summary of the playbook (optional)",
        json_schema_extra={"maxLength": DEFAULT_MAX_TEXT_CHARS},
    )
    memory_type: Literal["semantic", "procedural"] = "semantic"
    fact_type: FactType = "identity"
    confidence: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    supporting_episode_ids: list[str] = Field(default_factory=list, max_length=100)
    supersedes_id: str | None = Field(default=None, description="id of the live row this one replaces")
    contradiction: Contradiction | None = Field(
        default=None, description="natural: the world changed; harsh: the old fact was never true"
    )
    valid_from: IsoDatetime | None = Field(default=None, description="not after valid_to")
    valid_to: IsoDatetime | None = None
    name: str | None = Field(
        default=None, min_length=1, max_length=MAX_NAME_CHARS, description="playbook name (procedural)"
    )
    trigger_text: str = Field(default="", max_length=MAX_LINE_CHARS)
    description: str = Field(default="", json_schema_extra={"maxLength": DEFAULT_MAX_TEXT_CHARS})
    steps: list[StrictStep] = Field(default_factory=list, max_length=MAX_STEPS)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: IsoDatetime | None = Field(
        default=None, description="backdates the row (e.g. when copying memories over); default: now"
    )


class RecallRequest(_Request):
    query: str = _text("what to search for", max_chars=MAX_QUERY_CHARS)
    k: JsonInt = Field(default=10, ge=1, le=100)
    memory_types: list[MemoryType] | None = None
    include_catalog: bool = True
    include_superseded: bool = False
    as_of: IsoDatetime | None = Field(
        default=None,
        description="the present that time decay measures from (default: now): replays, audits; "
        "such a recall records no use",
    )
    record_use: bool | None = Field(
        default=None,
        description="count the returned facts as used (use_count + 1, last_used_at = now); "
        "default: yes, unless as_of is given",
    )
    min_confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="keep only the top k hits whose calibrated confidence reaches it; none left: "
        "abstained is true (nothing relevant is stored)",
    )
    view: RecallView = Field(
        default="full",
        description="full: each hit's row and score breakdown; compact: id, type, text, event_time, "
        "confidence and what a playbook needs, sized for a model's context",
    )


class CatalogCreate(_Request):
    text: str = _text("the catalog entry")
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


class KeyCreate(_Request):
    user_id: str = Field(pattern=USER_ID_PATTERN, description="the user whose memory the key opens")
    label: str = Field(default="", max_length=200)


class Me(BaseModel):
    user_id: str = Field(description="the user whose memory this key opens")


_ABSTAINED = Field(description="min_confidence was given and no hit reached it: nothing relevant is stored")


class RecallResponse(BaseModel):
    hits: list[Hit]
    abstained: bool = _ABSTAINED


class CompactRecallResponse(BaseModel):
    hits: list[CompactHit]
    abstained: bool = _ABSTAINED


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
    """Every error the API returns, whatever its status."""

    error: str = Field(description="stable machine-readable code, e.g. invalid_input")
    message: str = Field(description="what went wrong, for a person")


HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    503: "service_busy",
}
_MEANING = {
    401: "missing, unknown or revoked API key",
    403: "this key may not use this route (user key on an admin route, admin key on a memory route)",
    404: "no such row in your scope (also for other tenants' ids)",
    409: "the row's state forbids it (e.g. superseding an already superseded fact)",
    413: "request body over 1 MiB (imports: 64 MiB)",
    422: "invalid input (malformed JSON, a wrong type, empty or invisible text...): nothing was changed",
    503: "the store or a model failed (the server log has the details), or the server is busy",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, all with the ErrorBody schema."""
    return {status: {"model": ErrorBody, "description": _MEANING[status]} for status in statuses}


# Imports as jobs (interfaces/rest/imports.py).
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="names this import: sent again, or polled at GET .../import/{key}, it joins the job "
        "running or finished under it instead of running twice",
    ),
]
ImportWait = Annotated[
    float | None,
    Query(ge=0, le=300, description="seconds to wait for the job (at most the server's import_wait_s)"),
]
JobKey = Annotated[str, Path(min_length=1, max_length=MAX_KEY_CHARS, description="the Idempotency-Key")]
IMPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    202: {"model": ImportRunning, "description": "the import goes on: its progress so far"},
    **error_responses(409),
}
IMPORT_STATUS_RESPONSES = {**IMPORT_RESPONSES, **error_responses(404)}

"""Request and response shapes of the REST API (the rows themselves are engram.models).

Requests are strict: ``"k": true`` or ``"k": "5"`` is refused, not read as 1 or 5, and a timestamp is an
ISO 8601 string, never a number of seconds. Their JSON Schema states what the server accepts, and every
error response is documented with the one error body the server sends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from engram.import_records import session_id_field
from engram.interfaces.rest.imports import MAX_KEY_CHARS, ImportRunning
from engram.limits import (
    KEY_LABEL_PATTERN,
    MAX_BODY_BYTES,
    MAX_IMPORT_BYTES,
    MAX_KEY_LABEL_CHARS,
    MAX_KEY_LIFETIME_S,
    MAX_LINE_CHARS,
    MAX_METADATA_FILTER_KEYS,
    MAX_NAME_CHARS,
    MAX_PAGE_BOUND,
    MAX_SERVICE_RECALL_K,
    MAX_SESSION_ID_CHARS,
    MAX_STEPS,
    MAX_SUPPORTING_IDS,
    MAX_TITLE_CHARS,
    MIN_KEY_LIFETIME_S,
    SETTING_MARK,
)
from engram.models import (
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
from engram.recall_filter import MetadataKey, MetadataScalar
from engram.settings import DEFAULT_MAX_METADATA_CHARS, DEFAULT_MAX_TEXT_CHARS, EngramSettings
from engram.validation import MAX_METADATA_DEPTH, USER_ID_PATTERN
from engram.visibility import NUL_PATTERN, empty_or_visible_schema, refused_text, visible_schema

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_OFFSET = MAX_PAGE_BOUND  # far past any tenant's rows; keeps OFFSET inside every backend's integers
VISIBLE = "must contain at least one visible character (letter, digit, punctuation or symbol)"
LIMIT_MARK = SETTING_MARK
JsonDict = dict[str, Any]


def visible_text(*, empty: bool = False) -> Callable[[JsonDict], None]:
    """A text field's extra schema: the visible-character rule (``empty``: or nothing),
    and its maximum length, the store's ``max_text_chars``, which the engine enforces (so it is not
    checked twice here): publish_limits writes the running server's value."""

    def extra(schema: JsonDict) -> None:
        schema.update(
            {
                "not": refused_text(empty=not empty),
                "maxLength": DEFAULT_MAX_TEXT_CHARS,
                LIMIT_MARK: "max_text_chars",
            }
        )

    return extra


def publish_limits(app: FastAPI, settings: EngramSettings) -> None:
    """Make ``app``'s OpenAPI document show this server's limits where they are settings."""
    generate = app.openapi

    def openapi() -> JsonDict:
        if app.openapi_schema is None:
            document = generate()
            document["components"]["schemas"][METADATA_VALUE] = metadata_value_schema()
            _write_settings(document, settings)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


def _write_settings(node: object, settings: EngramSettings) -> None:
    if isinstance(node, dict):
        name = node.pop(LIMIT_MARK, None)
        if isinstance(name, str):
            node["maxLength"] = getattr(settings, name)
        for value in node.values():
            _write_settings(value, settings)
    elif isinstance(node, list):
        for value in node:
            _write_settings(value, settings)


def _text(description: str) -> Any:
    """A required text field, bounded by the store's ``max_text_chars``."""
    return Field(min_length=1, description=f"{description}; {VISIBLE}", json_schema_extra=visible_text())


METADATA_VALUE = "MetadataValue"  # the OpenAPI component for what metadata holds, at any depth
_METADATA_REF: JsonDict = {"$ref": f"#/components/schemas/{METADATA_VALUE}"}
_NO_NUL: JsonDict = {"not": {"pattern": NUL_PATTERN}}  # check_metadata's rule for every key and string


def metadata_value_schema() -> JsonDict:
    """Any JSON value without a NUL in a string or a key (PostgreSQL's jsonb cannot hold one)."""
    return {
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", **_NO_NUL},
            {"type": "array", "items": _METADATA_REF},
            {"type": "object", "propertyNames": _NO_NUL, "additionalProperties": _METADATA_REF},
        ]
    }


def _metadata(description: str = "free-form, kept verbatim") -> Any:
    return Field(
        default_factory=dict,
        description=f"{description}; at most {DEFAULT_MAX_METADATA_CHARS} characters as compact JSON by "
        f"default (the store's max_metadata_chars), nested at most {MAX_METADATA_DEPTH} deep",
        json_schema_extra={"propertyNames": _NO_NUL, "additionalProperties": _METADATA_REF},
    )


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TurnCreate(_Request):
    text: str = _text("the user's message, verbatim")
    at: IsoDatetime | None = Field(default=None, description="when it was said (default: now)")
    session_id: str | None = session_id_field()
    metadata: dict[str, Any] = _metadata(
        "free-form, kept verbatim; two keys have a meaning: assistant_context (the assistant "
        "message this turn replied to: searched with the turn, never made a fact) and speaker (who said "
        "it, in a conversation of several people: the turn is searched as 'Speaker: text', and a recall "
        "that names them ranks it up)"
    )


def _memory_rules() -> list[JsonDict]:
    procedural = {"properties": {"memory_type": {"const": "procedural"}}, "required": ["memory_type"]}
    fact_text = {"minLength": 1, "not": refused_text()}
    contradicts = {"properties": {"contradiction": {"type": "string"}}, "required": ["contradiction"]}
    supersedes = {"required": ["supersedes_id"], "properties": {"supersedes_id": {"type": "string"}}}
    # the other type's fields are refused when given (UserMemory.write): absent, empty or the default
    facts_only = {
        "fact_type": {"const": "identity"},
        "confidence": {"const": 1},
        "supporting_episode_ids": {"maxItems": 0},
        "valid_from": {"type": "null"},
        "valid_to": {"type": "null"},
    }
    playbooks_only = {
        "name": {"type": "null"},
        "trigger_text": {"maxLength": 0},
        "description": {"maxLength": 0},
        "steps": {"maxItems": 0},
    }
    return [
        {
            "if": procedural,
            "then": {"required": ["name"], "properties": {"name": {"type": "string"}, **facts_only}},
            "else": {"required": ["text"], "properties": {"text": fact_text, **playbooks_only}},
        },
        {"if": contradicts, "then": supersedes},
    ]


class MemoryCreate(_Request):
    # What each type needs, in the schema too: a fact its text, a playbook its name; and a
    # contradiction names how the row it supersedes was wrong, so it comes with supersedes_id.
    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(allOf=_memory_rules()))

    text: str = Field(
        default="",
        description=f"the fact (required, {VISIBLE}), or a summary of the playbook (optional)",
        json_schema_extra=visible_text(empty=True),
    )
    memory_type: Literal["semantic", "procedural"] = "semantic"
    fact_type: FactType = "identity"
    confidence: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    supporting_episode_ids: list[str] = Field(default_factory=list, max_length=MAX_SUPPORTING_IDS)
    supersedes_id: str | None = Field(default=None, description="id of the live row this one replaces")
    contradiction: Contradiction | None = Field(
        default=None,
        description="natural: the world changed; harsh: the old fact was never true (facts only: a playbook "
        "is revised, never retracted)",
    )
    valid_from: IsoDatetime | None = Field(
        default=None, description="not after valid_to; default: when the newest supporting episode was said"
    )
    valid_to: IsoDatetime | None = None
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="playbook name (procedural)",
        json_schema_extra=visible_schema,
    )
    trigger_text: str = Field(
        default="", max_length=MAX_LINE_CHARS, json_schema_extra=empty_or_visible_schema
    )
    description: str = Field(default="", json_schema_extra=visible_text(empty=True))
    steps: list[StrictStep] = Field(default_factory=list, max_length=MAX_STEPS)
    metadata: dict[str, Any] = _metadata()
    created_at: IsoDatetime | None = Field(
        default=None,
        description="backdates the row (e.g. when copying memories over), at most a day past the server's "
        "clock (the rule of a turn's time); default: now",
    )


class RecallRequest(_Request):
    query: str = _text("what to search for")
    k: JsonInt = Field(default=10, ge=1, le=MAX_SERVICE_RECALL_K)
    memory_types: list[MemoryType] | None = Field(default=None, min_length=1, description="default: all")
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
    # The recall filters (engram.recall_filter), applied inside the search: k matching rows are found.
    session_id: str | None = Field(
        default=None, min_length=1, max_length=MAX_SESSION_ID_CHARS, description="only this session's turns"
    )
    time_from: IsoDatetime | None = Field(
        default=None, description="only rows whose event time is at or after this (inclusive)"
    )
    time_to: IsoDatetime | None = Field(
        default=None,
        description="only rows whose event time is before this (exclusive); not before time_from",
    )
    metadata: dict[MetadataKey, MetadataScalar] | None = Field(
        default=None,
        max_length=MAX_METADATA_FILTER_KEYS,
        description="only rows whose top-level metadata has each of these values (numbers by value)",
    )


class CatalogCreate(_Request):
    text: str = _text("the catalog entry")
    title: str = Field(default="", max_length=MAX_TITLE_CHARS, json_schema_extra=empty_or_visible_schema)
    metadata: dict[str, Any] = _metadata()


class KeyCreate(_Request):
    user_id: str = Field(pattern=USER_ID_PATTERN, description="the user whose memory the key opens")
    label: str = Field(
        default="", max_length=MAX_KEY_LABEL_CHARS, pattern=KEY_LABEL_PATTERN, description="one line of text"
    )
    scope: Literal["read", "write"] = Field(
        default="write", description="read: recall, list and read only (writes answer 403); write: also write"
    )
    expires_in_s: int | None = Field(
        default=None,
        ge=MIN_KEY_LIFETIME_S,
        le=MAX_KEY_LIFETIME_S,
        description="seconds until the key stops working (401 key expired); none: it never expires",
    )


class Me(BaseModel):
    user_id: str = Field(description="the user whose memory this key opens")
    scope: Literal["read", "write"] = Field(default="write", description="what this key may do")


class UserDeleted(BaseModel):
    user_id: str
    deleted: dict[str, int] = Field(
        description="how many of each kind were deleted (memories, tombstones, keys, sessions...); "
        "empty when nothing was left"
    )


_ABSTAINED = Field(description="min_confidence was given and no hit reached it: nothing relevant is stored")
_NOTHING_CONFIDENT = Field(
    description="no hit reaches min_confidence or, without it, the service's default threshold "
    "(ENGRAM_MIN_CONFIDENCE, 0.1: the agent's and MCP's): whatever hits are listed, none is likely relevant"
)


_SHED = Field(
    description="the server was loaded and computed this recall without the cross-encoder: the hits are in "
    "the previous stage's order (also said by the Engram-Recall-Shed header)"
)
SHED_HEADER = "Engram-Recall-Shed"


class RecallResponse(BaseModel):
    hits: list[Hit]
    abstained: bool = _ABSTAINED
    nothing_confident: bool = _NOTHING_CONFIDENT
    shed: bool = _SHED


class CompactRecallResponse(BaseModel):
    hits: list[CompactHit]
    abstained: bool = _ABSTAINED
    nothing_confident: bool = _NOTHING_CONFIDENT
    shed: bool = _SHED


class MemoryList(BaseModel):
    data: list[Memory]
    limit: int
    offset: int
    type: Literal["episodic", "semantic", "procedural"] | None = Field(
        default=None,
        description="the type listed: semantic unless ?type= names another (an empty list of facts beside "
        "stored turns surprised a newcomer); null for a history, which holds one chain",
    )


class PlaybookOutcome(_Request):
    success: bool = Field(description="true: the playbook worked; false: it did not")


class ConsolidationRunResponse(BaseModel):
    """A consolidation run (engram.interfaces.consolidation_runs): queued or running, then succeeded
    (``counts``: what it read and wrote; ``note`` when part was set aside) or failed (``error``)."""

    run_id: str
    status: Literal["queued", "running", "succeeded", "failed"]
    created_at: datetime
    finished_at: datetime | None = None
    counts: dict[str, int] | None = None
    note: str | None = None
    error: str | None = None


class ForgetResponse(BaseModel):
    forgotten: Tombstone


class KeyPublic(BaseModel):
    id: str
    user_id: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None = None
    scope: Literal["read", "write", "admin"] = "write"
    expires_at: datetime | None = None


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
    401: "missing, unknown or revoked API key, or key expired",
    403: "this key may not use this route (user key on an admin route, admin key on a memory route, "
    "read-only key on a write)",
    404: "no such row in your scope (also for other tenants' ids)",
    409: "the row's state forbids it (e.g. superseding an already superseded fact)",
    413: f"request body over {MAX_BODY_BYTES >> 20} MiB (imports: {MAX_IMPORT_BYTES >> 20} MiB)",
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

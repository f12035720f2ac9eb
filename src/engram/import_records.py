"""The import file's records (engram.importer reads them): what each field takes, and the JSON Schema
the REST API shows for them, both from one declaration."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from engram.limits import MAX_COUNT, MAX_SESSION_ID_CHARS, MAX_TITLE_CHARS, SESSION_ID_PATTERN, SETTING_MARK
from engram.models import Contradiction, FactType, IsoDatetime, JsonInt, StrictStep
from engram.settings import DEFAULT_MAX_TEXT_CHARS
from engram.validation import aware
from engram.visibility import empty_or_visible_schema, visible_schema

MAX_DAYS_AGO = 365_250  # 1000 years: any real history, far from the year 1 where datetimes end


class Record(BaseModel):
    # strict: "confidence": "0.9" or "success_count": true is a mistake in the file, not a number
    model_config = ConfigDict(extra="forbid", strict=True)

    key: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


# What the schemas say beside the fields (the REST API's OpenAPI shows these records).
_BOTH_TIMES: JsonDict = {
    "required": ["timestamp", "days_ago"],
    "properties": {"timestamp": {"type": "string"}, "days_ago": {"type": "number"}},
}
_CONTRADICTS: JsonDict = {"required": ["contradiction"], "properties": {"contradiction": {"type": "string"}}}
_SUPERSEDES: JsonDict = {"required": ["supersedes"], "properties": {"supersedes": {"type": "string"}}}


def _visible_bounded(schema: JsonDict) -> None:
    visible_schema(schema)
    schema.update({"maxLength": DEFAULT_MAX_TEXT_CHARS, SETTING_MARK: "max_text_chars"})  # the store's


def _empty_or_visible_bounded(schema: JsonDict) -> None:
    empty_or_visible_schema(schema)
    schema.update({"maxLength": DEFAULT_MAX_TEXT_CHARS, SETTING_MARK: "max_text_chars"})


def session_id_field() -> Any:
    """A turn's optional session id, as every request and import states it (``check_session_id``)."""
    return Field(
        default=None,
        min_length=1,
        max_length=MAX_SESSION_ID_CHARS,
        pattern=SESSION_ID_PATTERN,
        json_schema_extra=visible_schema,
    )


def _text() -> Any:
    return Field(json_schema_extra=_visible_bounded)


def _optional_text() -> Any:
    return Field(default="", json_schema_extra=_empty_or_visible_bounded)


class Timed(Record):
    # The schema says it too: a record with both a timestamp and days_ago is refused.
    model_config = ConfigDict(json_schema_extra={"not": _BOTH_TIMES})

    timestamp: IsoDatetime | None = None
    days_ago: float | None = Field(default=None, ge=0, le=MAX_DAYS_AGO, allow_inf_nan=False)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, at: datetime | None) -> datetime | None:
        return aware(at)  # stored in UTC like every other timestamp; its InvalidInput is a ValueError

    @model_validator(mode="after")
    def _one_time(self) -> Timed:
        if self.timestamp is not None and self.days_ago is not None:
            raise ValueError("give either timestamp or days_ago, not both")
        return self

    def at(self, now: datetime) -> datetime | None:
        if self.days_ago is not None:
            return now - timedelta(days=self.days_ago)
        return self.timestamp


class EpisodeRecord(Timed):
    text: str = _text()
    session_id: str | None = session_id_field()


class FactRecord(Timed):
    # A contradiction says how the fact it supersedes was wrong: only with supersedes.
    model_config = ConfigDict(json_schema_extra={"not": _BOTH_TIMES, "if": _CONTRADICTS, "then": _SUPERSEDES})

    text: str = _text()
    fact_type: FactType = "identity"
    confidence: float = Field(default=1.0, ge=0, le=1)
    supporting_episodes: list[str] = Field(default_factory=list)
    supersedes: str | None = None
    contradiction: Contradiction | None = None


class PlaybookRecord(Timed):
    name: str = Field(min_length=1, json_schema_extra=visible_schema)
    text: str = _optional_text()
    trigger_text: str = _optional_text()
    description: str = _optional_text()
    steps: list[StrictStep] = Field(default_factory=list)
    success_count: JsonInt = Field(default=0, ge=0, le=MAX_COUNT)
    failure_count: JsonInt = Field(default=0, ge=0, le=MAX_COUNT)


class UserDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user_id: str | None = None
    episodic: list[EpisodeRecord] = Field(default_factory=list)
    semantic: list[FactRecord] = Field(default_factory=list)
    procedural: list[PlaybookRecord] = Field(default_factory=list)


class CatalogRecord(Record):
    title: str = Field(default="", max_length=MAX_TITLE_CHARS, json_schema_extra=empty_or_visible_schema)
    text: str = _text()

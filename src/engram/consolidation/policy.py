"""What a consolidation run is told (ConsolidationPolicy, from the settings) and what it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engram.settings import DEFAULT_MAX_TEXT_CHARS


@dataclass(frozen=True)
class ConsolidationPolicy:
    batch_size: int = 40
    duplicate_similarity: float = 0.90  # cosine at or above: the same fact, merge provenance
    judge_similarity: float = 0.75  # cosine in [judge, duplicate): ask the LLM judge
    # cosine at or above to a fact the same reply replaces: a restatement of it, dropped ("Sarah is living
    # in Bristol" 0.977); another person's fact worded alike is not ("Sarah's son is allergic ..." 0.939)
    repeat_similarity: float = 0.97
    confidence_floor: float = 0.6  # below: dropped
    supersede_penalty: float = 0.1
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS  # a fact the facade's write would refuse is dropped


@dataclass
class ConsolidationReport:
    user_id: str
    status: str = "ok"
    batches: int = 0
    episodes: int = 0
    written: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    skipped_episodes: list[str] = field(default_factory=list)  # ids the LLM could not read

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

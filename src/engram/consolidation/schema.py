"""What the consolidation prompt must return, and the judge's verdicts (validated with pydantic)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engram.models import Contradiction, FactType, Step


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class NewFact(_Out):
    text: str = Field(min_length=1)
    fact_type: FactType = "identity"
    confidence: float = Field(default=0.8, ge=0, le=1)
    supporting_episode_ids: list[str] = Field(default_factory=list)


class NewPlaybook(_Out):
    name: str = Field(min_length=1)
    trigger_text: str = ""
    description: str = ""
    steps: list[Step] = Field(default_factory=list)
    supporting_episode_ids: list[str] = Field(default_factory=list)


class ProceduralUpdate(_Out):
    playbook_id: str
    outcome: Literal["success", "failure"]
    evidence_episode_ids: list[str] = Field(default_factory=list)
    refined_steps: list[Step] | None = None


class SupersessionOut(_Out):
    fact_id: str
    new_text: str = Field(min_length=1)
    contradiction: Contradiction = "natural"
    fact_type: FactType = "identity"
    confidence: float = Field(default=0.9, ge=0, le=1)
    supporting_episode_ids: list[str] = Field(default_factory=list)


class Extraction(_Out):
    facts: list[NewFact] = Field(default_factory=list)
    playbooks: list[NewPlaybook] = Field(default_factory=list)
    procedural_updates: list[ProceduralUpdate] = Field(default_factory=list)
    supersessions: list[SupersessionOut] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)  # items left out: "facts.2: confidence: ..."

    @model_validator(mode="before")
    @classmethod
    def _items_one_by_one(cls, data: Any) -> Any:
        """An item of the wrong shape ("confidence": "high") is left out and named in ``rejected``; it
        used to reject the whole reply, and splitting then set the turn aside with its good items."""
        if not isinstance(data, dict):
            return data
        kept, rejected = dict(data), []
        for key, item_model in _ITEMS.items():
            items = data.get(key)
            if not isinstance(items, list):
                continue
            kept[key] = []
            for index, item in enumerate(items):
                try:
                    kept[key].append(item_model.model_validate(item))
                except ValidationError as exc:
                    first = exc.errors()[0]
                    rejected.append(f"{key}.{index}: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        kept["rejected"] = rejected
        return kept


_ITEMS: dict[str, type[_Out]] = {
    "facts": NewFact,
    "playbooks": NewPlaybook,
    "procedural_updates": ProceduralUpdate,
    "supersessions": SupersessionOut,
}


class Verdict(_Out):
    index: int
    duplicate_of: str | None = Field(default=None, description="id of the existing fact it repeats, or null")
    replaces: str | None = Field(default=None, description="id of the existing fact it changes, or null")


class JudgeVerdicts(_Out):
    verdicts: list[Verdict] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)  # verdicts left out: "verdicts.1: index: ..."

    @model_validator(mode="before")
    @classmethod
    def _verdicts_one_by_one(cls, data: Any) -> Any:
        """A verdict of the wrong shape ({"index": "first"}) is left out and named in ``rejected``: its
        candidate is written as a new fact, as with no verdict; it used to fail the judge call and with
        it the whole batch."""
        if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
            return data
        kept, rejected = [], []
        for index, item in enumerate(data["verdicts"]):
            try:
                kept.append(Verdict.model_validate(item))
            except ValidationError as exc:
                first = exc.errors()[0]
                rejected.append(f"verdicts.{index}: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return {**data, "verdicts": kept, "rejected": rejected}

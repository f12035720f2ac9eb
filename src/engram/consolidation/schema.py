"""What the consolidation prompt must return, and the judge's verdicts (validated with pydantic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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


class Verdict(_Out):
    index: int
    duplicate_of: str | None = Field(default=None, description="id of the existing fact it repeats, or null")
    replaces: str | None = Field(default=None, description="id of the existing fact it changes, or null")


class JudgeVerdicts(_Out):
    verdicts: list[Verdict] = Field(default_factory=list)

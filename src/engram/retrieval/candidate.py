"""Candidate: one row on its way through recall's stages, keyed by id, with its scores and explain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engram.models import Memory
from engram.retrieval.late_interaction import text_similarity
from engram.retrieval.scoring import product


@dataclass
class Candidate:
    """One row on its way through the stages, keyed by id; collects its explain as it goes."""

    memory: Memory
    rrf: float
    bm25_rank: int | None = None
    dense_rank: int | None = None
    bm25_score: float | None = None
    dense_score: float | None = None
    multipliers: dict[str, float] = field(default_factory=dict)
    late: float | None = None  # min-max scaled in the head (late_interaction.normalised): a rank, not a score
    late_raw: float | None = None  # the MaxSim itself (mean cosine): what confidence is calibrated on
    coverage: float | None = None  # the query's least-matched content word (late_interaction.query_coverage)
    rerank: float | None = None
    rerank_weight: float = 1.0
    tokens: bytes | None = None  # its stored token vectors, kept from late interaction (currency.py)

    @property
    def relevance(self) -> float:
        if self.rerank is not None:
            return blended(self.rerank, self.late, self.rerank_weight)
        return self.late if self.late is not None else self.rrf

    @property
    def final(self) -> float:
        return self.relevance * product(self.multipliers)

    @property
    def stage(self) -> str:
        """The stage whose score its relevance is: ``rerank``, ``late_interaction`` or ``rrf``."""
        return "rerank" if self.rerank is not None else "late_interaction" if self.late is not None else "rrf"

    def explain(self, errors: dict[str, str], notes: dict[str, str]) -> dict[str, Any]:
        info: dict[str, Any] = {
            "bm25_rank": self.bm25_rank,
            "bm25_score": self.bm25_score,
            "dense_rank": self.dense_rank,
            "dense_score": self.dense_score,
            "rrf": self.rrf,
            "late_interaction": self.late,
            "late_interaction_raw": self.late_raw,
            "query_coverage": self.coverage,
            "rerank": self.rerank,
            "relevance": self.stage,
            **self.multipliers,
            "final": self.final,
        }
        if self.rerank is not None and self.rerank_weight != 1.0:
            info["rerank_weight"] = self.rerank_weight  # relevance mixes in the late score (blended)
        info.update({f"{name}_error": error for name, error in errors.items()})
        info.update(notes)  # a stage left out on purpose, or run on part of its window, says why
        return info


def blended(rerank: float, late: float | None, weight: float) -> float:
    """A reranked row's relevance: ``w x rerank + (1 - w) x late`` (``rerank`` alone without a late score).

    The cross-encoder reads query and row together; late interaction matches them token by token
    against the row and the turn it replied to. Each misses what the other sees, so their mix ranks
    better than either (LoCoMo dev, docs/benchmarks.md). Both are in [0, 1]: a probability and a
    min-max-scaled MaxSim. Example: rerank 0.9, late 0.5, w 0.3 -> 0.27 + 0.35 = 0.62.
    """
    return rerank if late is None else weight * rerank + (1.0 - weight) * late


def matches_as_well(new: Candidate, old: Candidate, margin: float) -> bool:
    """``new.late_raw >= old.late_raw - margin``; False without both scores (late interaction off)."""
    return new.late_raw is not None and old.late_raw is not None and new.late_raw >= old.late_raw - margin


def subject_match(dim: int) -> Callable[[Candidate, Candidate], float | None]:
    """How closely two candidates' stored token vectors match each other (``text_similarity``), or None
    without both: how ``currency`` and ``past_first`` tell whether two rows are on one subject."""

    def match(new: Candidate, old: Candidate) -> float | None:
        return (
            None if new.tokens is None or old.tokens is None else text_similarity(new.tokens, old.tokens, dim)
        )

    return match

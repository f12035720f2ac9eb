"""RetrievalConfig: the knobs of one recall, frozen so a shared preset can never be mutated."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from engram import settings as s
from engram.retrieval.confidence import Calibration

Leg = Literal["bm25", "dense"]
DEFAULT_CALIBRATION = Calibration(
    s.DEFAULT_CONFIDENCE_RERANK,
    s.DEFAULT_CONFIDENCE_LATE,
    s.DEFAULT_CONFIDENCE_DENSE,
    s.DEFAULT_CONFIDENCE_LEADER,
    s.DEFAULT_CONFIDENCE_COVERAGE_MEAN,
    s.DEFAULT_CONFIDENCE_BELOW,
)


@dataclass(frozen=True)
class RetrievalConfig:
    legs: tuple[Leg, ...] = ("bm25", "dense")
    leg_candidates: int = s.DEFAULT_LEG_CANDIDATES
    rrf_k: float = s.DEFAULT_RRF_K
    late_interaction: bool = True  # MaxSim over stored token vectors re-orders the fused candidates
    late_window: int = s.DEFAULT_LATE_WINDOW
    rerank: bool = True
    rerank_window: int = s.DEFAULT_RERANK_WINDOW
    rerank_weight: float = s.DEFAULT_RERANK_WEIGHT  # cross-encoder's share of a reranked relevance
    rerank_gap: float = s.DEFAULT_RERANK_GAP  # raw turns: only contested places reranked (contenders.py)
    rerank_gap_distilled: float = s.DEFAULT_RERANK_GAP_DISTILLED  # ... in a window holding a fact
    multipliers: bool = True  # decay, use-count boost and catalog prior
    decay_offset_days: float = s.DEFAULT_DECAY_OFFSET_DAYS
    decay_scale_days: float = s.DEFAULT_DECAY_SCALE_DAYS
    decay_value: float = s.DEFAULT_DECAY_VALUE
    use_count_weight: float = s.DEFAULT_USE_COUNT_WEIGHT
    catalog_prior: float = s.DEFAULT_CATALOG_PRIOR
    time_match_boost: float = s.DEFAULT_TIME_MATCH_BOOST
    speaker_match_boost: float = s.DEFAULT_SPEAKER_MATCH_BOOST
    procedural_feedback: bool = (
        False  # success_prior: off, it cost MRR on the eval corpus (docs/benchmarks.md)
    )
    current_first: bool = True  # a newer memory that replaces an older one ranks first (currency.py)
    replace_margin: float = s.DEFAULT_REPLACE_MARGIN
    change_places: int = s.DEFAULT_CHANGE_PLACES  # for a query that expects a change (currency.py)
    same_subject: float = s.DEFAULT_SAME_SUBJECT  # two turns' token-vector match: one subject (currency.py)
    related_subject: float = s.DEFAULT_RELATED_SUBJECT  # ... a related one
    outdated_factor: float = s.DEFAULT_OUTDATED_FACTOR
    recency_half_life_days: float = s.DEFAULT_RECENCY_HALF_LIFE_DAYS  # 0: off (currency.put_recent_first)
    asked_factor: float = s.DEFAULT_ASKED_FACTOR  # score and confidence of a turn re-asking the query
    missing_value_factor: float = s.DEFAULT_MISSING_VALUE_FACTOR  # confidence kept without the asked value
    missing_value_rank: float = s.DEFAULT_MISSING_VALUE_RANK  # ... and score
    calibration: Calibration = DEFAULT_CALIBRATION  # raw stage scores -> confidence (retrieval.confidence)

    def but(self, **changes: Any) -> RetrievalConfig:
        """A copy with some fields changed (the preset itself stays as it was)."""
        return replace(self, **changes)

    @classmethod
    def from_settings(cls, settings: s.EngramSettings) -> RetrievalConfig:
        return cls(
            leg_candidates=settings.leg_candidates,
            rrf_k=settings.rrf_k,
            late_interaction=settings.late_interaction,
            late_window=settings.late_window,
            rerank=settings.rerank,
            rerank_window=settings.rerank_window,
            rerank_weight=settings.rerank_weight,
            rerank_gap=settings.rerank_gap,
            rerank_gap_distilled=settings.rerank_gap_distilled,
            decay_offset_days=settings.decay_offset_days,
            decay_scale_days=settings.decay_scale_days,
            decay_value=settings.decay_value,
            use_count_weight=settings.use_count_weight,
            catalog_prior=settings.catalog_prior,
            time_match_boost=settings.time_match_boost,
            speaker_match_boost=settings.speaker_match_boost,
            procedural_feedback=settings.procedural_feedback,
            current_first=settings.current_first,
            replace_margin=settings.replace_margin,
            change_places=settings.change_places,
            same_subject=settings.same_subject,
            related_subject=settings.related_subject,
            outdated_factor=settings.outdated_factor,
            recency_half_life_days=settings.recency_half_life_days,
            asked_factor=settings.asked_factor,
            missing_value_factor=settings.missing_value_factor,
            missing_value_rank=settings.missing_value_rank,
            calibration=Calibration(
                settings.confidence_rerank,
                settings.confidence_late,
                settings.confidence_dense,
                settings.confidence_leader,
                settings.confidence_coverage_mean,
                settings.confidence_below,
            ),
        )

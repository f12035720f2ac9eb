"""What the inspector's templates show of a hit's explain, and how they print numbers and times."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

STAGE_KEYS = (
    "bm25_rank",
    "bm25_score",
    "dense_rank",
    "dense_score",
    "rrf",
    "late_interaction",
    "late_interaction_raw",
    "outdated_by",  # shown on the hit itself, as a link
    "rerank",
    "relevance",
    "final",
)


RELEVANCE_LABELS = {"rrf": "RRF", "late_interaction": "late interaction", "rerank": "cross-encoder"}


@dataclass(frozen=True)
class ExplainParts:
    stages: list[tuple[str, str]]  # (stage, value) in pipeline order
    relevance: str  # the stage whose score the final score starts from, as named in ``stages``
    multipliers: list[tuple[str, float]]
    notes: list[tuple[str, str]]  # stages that failed or were skipped, and why
    final: float | None


def explain_parts(explain: Mapping[str, Any]) -> ExplainParts:
    """A hit's explain dict, grouped for display: each stage, each multiplier, each note."""

    def leg(name: str) -> str:
        rank, score = explain.get(f"{name}_rank"), explain.get(f"{name}_score")
        return "not found" if rank is None else f"#{rank} ({num(score)})"

    stages = [
        ("BM25", leg("bm25")),
        ("dense", leg("dense")),
        ("RRF", num(explain.get("rrf"))),
        ("late interaction", num(explain.get("late_interaction"))),
        ("cross-encoder", num(explain.get("rerank"))),
    ]
    multipliers = [
        (k, float(v))
        for k, v in explain.items()
        if k not in STAGE_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
    ]
    notes = [(k, str(v)) for k, v in explain.items() if k not in STAGE_KEYS and isinstance(v, str)]
    final = explain.get("final")
    return ExplainParts(
        stages,
        RELEVANCE_LABELS.get(str(explain.get("relevance")), ""),
        multipliers,
        notes,
        float(final) if isinstance(final, int | float) else None,
    )


def num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M")

"""What the inspector's templates show of a hit's explain, and how they print numbers and times."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

STAGE_KEYS = (
    "bm25_rank",
    "bm25_score",
    "dense_rank",
    "dense_score",
    "rrf",
    "late_interaction",
    "late_interaction_raw",
    "query_coverage",  # a feature of the confidence, not a multiplier of the score
    "outdated_by",  # shown on the hit itself, as a link
    "rerank_weight",  # a blend weight, not a multiplier: shown as a note on the relevance
    "rerank",
    "relevance",
    "final",
)


# Notes that describe a whole recall (each hit's explain repeats them): shown once above its hits, named
# as the legend names the stage.
RECALL_NOTES = {"rerank": "cross-encoder", "rerank_contenders": "cross-encoder read"}


def is_recall_note(name: str) -> bool:
    """A note about the recall, not the hit: the rerank stage's, or a failed stage's (``<stage>_error``)."""
    return name in RECALL_NOTES or name.endswith("_error")


def recall_notes(hits: Sequence[Any]) -> list[tuple[str, str, bool]]:
    """(name, text, a failure) of the notes about a recall, from its first hit's explain."""
    explain: Mapping[str, Any] = hits[0].explain if hits else {}
    notes = [(k, str(v)) for k, v in explain.items() if isinstance(v, str) and is_recall_note(k)]
    return [(RECALL_NOTES.get(k, k), v, k.endswith("_error")) for k, v in notes]


def time_label(memory: Any) -> str:
    """What a hit's event time is: when a turn was said, since when a fact holds, else when stored."""
    kind = getattr(memory, "memory_type", "")
    if kind == "episodic":
        return "said"
    return "true from" if kind == "semantic" and getattr(memory, "valid_from", None) else "stored"


def event_counts(events: Sequence[Any]) -> str:
    """What happened after a turn, by kind: "1 recall, 2 writes"; "nothing else" when nothing did."""
    counts: dict[str, int] = {}
    for event in events:
        counts[event.kind] = counts.get(event.kind, 0) + 1
    said = [f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in counts.items()]
    return ", ".join(said) or "nothing else"


RELEVANCE_LABELS = {"rrf": "RRF", "late_interaction": "late interaction", "rerank": "cross-encoder"}


# What the explain's names mean, for the legend under a recall (as the explain spells them; a recall's notes
# as the page shows them, RECALL_NOTES).
LEGEND: tuple[tuple[str, str], ...] = (
    ("BM25", "keyword match: rank among the keyword hits (and its score: ~0 for words in half the rows)"),
    ("dense", "meaning match: rank among the embedding hits (and its cosine similarity)"),
    ("RRF", "the two ranks fused (reciprocal rank fusion): the first relevance"),
    ("late interaction", "query and row matched token by token, 0-1 within the shortlist"),
    ("cross-encoder", "a model reading query and row together: probability of relevance, 0-1"),
    ("relevance", "the highlighted stage: the last one that ran; the final score starts from it"),
    ("decay", "older facts and turns count less (playbooks never decay)"),
    ("use_count_boost", "facts recalled often count more"),
    ("source_prior", "how much a kind of row is trusted: catalog rows count a little less"),
    ("success_prior", "a playbook's successes against its failures"),
    ("time_match", "the row's time matches a time the query names"),
    ("speaker_match", "the turn's speaker is the one the query names"),
    ("update_lift", "the newer memory of a change, lifted just above the one it replaced"),
    ("outdated", "a fact or turn a newer one replaced, kept below it"),
    ("recency", 'a question about now ("these days", "still"): an older turn counts a little less'),
    ("stage_scale", "a stage ran on part of the shortlist: its score is scaled to compare"),
    ("confidence", "calibrated chance, 0-1, that the hit is relevant to the query"),
    ("missing_value", "it lacks the name, number, day, colour... asked for (asked_value): ranks lower"),
    ("asked_value", "the kind of value the question asks for, which this row does not state"),
    ("score", "final = relevance x every multiplier; only multipliers other than 1 are shown"),
    ("cross-encoder read", "the rows the cross-encoder scored: those that could change the top"),
)


@dataclass(frozen=True)
class ExplainParts:
    stages: list[tuple[str, str]]  # (stage, value) in pipeline order
    relevance: str  # the stage whose score the final score starts from, as named in ``stages``
    multipliers: list[tuple[str, float]]  # those that changed the score (not 1)
    neutral: int  # multipliers at 1, not shown
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
    factors = [
        (k, float(v))
        for k, v in explain.items()
        if k not in STAGE_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
    ]
    shown = [(k, v) for k, v in factors if round(v, 3) != 1]
    notes = [
        (k, str(v))
        for k, v in explain.items()
        if k not in STAGE_KEYS and isinstance(v, str) and not is_recall_note(k)
    ]
    weight = explain.get("rerank_weight")
    if isinstance(weight, int | float):
        blend = f"{num(float(weight))} x cross-encoder + {num(1 - float(weight))} x late interaction"
        notes.insert(0, ("relevance", blend))
    final = explain.get("final")
    return ExplainParts(
        stages,
        RELEVANCE_LABELS.get(str(explain.get("relevance")), ""),
        shown,
        len(factors) - len(shown),
        notes,
        float(final) if isinstance(final, int | float) else None,
    )


def num(value: Any) -> str:
    """A score as people read it: at most three decimals, never scientific notation."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (value == int(value) and abs(value) >= 1):
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if value == 0:
        return "0"
    if abs(value) < 1e-8:
        return "≈0"
    # three decimals, or two significant digits of a smaller number (0.000012): the order stays readable
    decimals = max(3, 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


def when(value: datetime | None) -> str:
    """A time as the pages show it, in UTC, saying so: ``2025-03-01 09:30 UTC``."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")

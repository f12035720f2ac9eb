"""Retrieval metrics over ranked id lists (pure functions)."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def first_gold_rank(ranked: Sequence[str], gold: Collection[str]) -> int | None:
    """1-based rank of the first gold id in ``ranked``, or None."""
    for rank, doc_id in enumerate(ranked, start=1):
        if doc_id in gold:
            return rank
    return None


def recall_at_k(ranks: Sequence[int | None], k: int) -> float:
    """Share of questions whose first gold id is within the top k."""
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks) if ranks else 0.0


def mean_reciprocal_rank(ranks: Sequence[int | None]) -> float:
    """Mean of 1/rank of the first gold id (0 when absent)."""
    return sum(1.0 / r for r in ranks if r is not None) / len(ranks) if ranks else 0.0

"""Reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rrf(rankings: Mapping[str, Sequence[str]], k: float = 30.0) -> dict[str, float]:
    """Fuse ranked id lists: ``s(d) = Σ_legs 1 / (k + rank_leg(d))``, ranks 1-based.

    A document missing from a leg gets nothing from it. RRF needs no calibration between the legs'
    raw scores (BM25 is unbounded, cosine is in [-1, 1]); only ranks matter. k = 30 (Atlas) is tighter
    than the usual 60 (Cormack et al., SIGIR 2009), so the top ranks of each leg weigh more.

    Example (k = 30): a document ranked 1st by BM25 and 3rd by dense scores
    1/31 + 1/33 = 0.06256; one ranked 1st by a single leg scores 1/31 = 0.03226.

    Returns ids mapped to scores, in descending score order (ties keep first-seen order).
    """
    if k <= 0:
        raise ValueError("k must be > 0")
    scores: dict[str, float] = {}
    for ranking in rankings.values():
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    return dict(sorted(scores.items(), key=lambda item: -item[1]))

"""Recall: legs -> RRF -> shape -> rerank window -> final score -> top k.

1. Two legs over the tenant's scope, ``leg_candidates`` each: BM25 (FTS) and exact dense kNN.
2. Fuse by RRF (``fusion.rrf``).
3. Multipliers (``scoring.multipliers``) shape the fused order, which decides who enters the window.
4. The cross-encoder scores the top ``rerank_window`` candidates; if it raises, recall continues on
   RRF order and says so in every hit's explain.
5. Final score = relevance × Π multipliers (relevance = rerank probability, else RRF). Reranked
   candidates rank above the rest of the window's tail, which keeps its RRF order.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engram.models import Hit, Memory, MemoryType
from engram.providers.base import Embedder, Reranker
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.fusion import rrf
from engram.retrieval.scoring import multipliers, product
from engram.storage._rows import search_text_of
from engram.storage.base import SearchFilter, Store, Tenant

log = logging.getLogger(__name__)
_LEG_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="engram-leg")


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
    rerank: float | None = None

    @property
    def relevance(self) -> float:
        return self.rerank if self.rerank is not None else self.rrf

    @property
    def final(self) -> float:
        return self.relevance * product(self.multipliers)

    def explain(self, rerank_error: str | None) -> dict[str, Any]:
        info: dict[str, Any] = {
            "bm25_rank": self.bm25_rank,
            "bm25_score": self.bm25_score,
            "dense_rank": self.dense_rank,
            "dense_score": self.dense_score,
            "rrf": self.rrf,
            "rerank": self.rerank,
            "relevance": "rerank" if self.rerank is not None else "rrf",
            **self.multipliers,
            "final": self.final,
        }
        if rerank_error:
            info["rerank_error"] = rerank_error
        return info


def recall(
    store: Store,
    embedder: Embedder,
    reranker: Reranker | None,
    tenant: Tenant,
    query: str,
    *,
    k: int,
    memory_types: frozenset[MemoryType],
    include_superseded: bool,
    config: RetrievalConfig,
    now: datetime,
) -> list[Hit]:
    where = SearchFilter(memory_types=memory_types, include_superseded=include_superseded)
    legs: dict[str, list[tuple[str, float]]] = {}
    # The BM25 leg runs on a worker thread while this one embeds the query: SQLite and onnxruntime
    # both release the GIL, so the two legs overlap instead of adding up.
    text_leg = (
        _LEG_POOL.submit(store.search_text, tenant, query, where, config.leg_candidates)
        if "bm25" in config.legs
        else None
    )
    if "dense" in config.legs:
        vector = embedder.embed_query(query)
        legs["dense"] = [
            (h.id, h.score) for h in store.search_vector(tenant, vector, where, config.leg_candidates)
        ]
    if text_leg is not None:
        legs = {"bm25": [(h.id, h.score) for h in text_leg.result()], **legs}
    fused = rrf({leg: [i for i, _ in hits] for leg, hits in legs.items()}, k=config.rrf_k)
    rows = {m.id: m for m in store.get(tenant, list(fused), include_catalog="catalog" in memory_types)}
    candidates = [Candidate(memory=rows[i], rrf=s) for i, s in fused.items() if i in rows]
    by_id = {c.memory.id: c for c in candidates}
    for leg, hits in legs.items():
        for rank, (doc_id, score) in enumerate(hits, start=1):
            if doc_id in by_id:
                setattr(by_id[doc_id], f"{leg}_rank", rank)
                setattr(by_id[doc_id], f"{leg}_score", score)
    for c in candidates:
        c.multipliers = multipliers(c.memory, now, config)
    candidates.sort(key=lambda c: -c.final)

    rerank_error = None
    if config.rerank and reranker is not None and config.rerank_window > 0 and candidates:
        window = candidates[: config.rerank_window]
        rerank_error = apply_rerank(reranker, query, window)
        if rerank_error is None:
            window.sort(key=lambda c: -c.final)
            candidates[: len(window)] = window

    return [
        Hit(memory=c.memory, score=c.final, rank=rank, explain=c.explain(rerank_error))
        for rank, c in enumerate(candidates[:k], start=1)
    ]


def apply_rerank(reranker: Reranker, query: str, window: list[Candidate]) -> str | None:
    """Set each window candidate's rerank probability; return an error text instead of raising."""
    try:
        scores = reranker.score(query, [search_text_of(c.memory) for c in window])
        if len(scores) != len(window):
            raise ValueError(f"reranker returned {len(scores)} scores for {len(window)} passages")
    except Exception as exc:  # recall must never fail because of the reranker
        log.warning("reranker failed, falling back to RRF order: %s", exc)
        return f"{type(exc).__name__}: {exc}"
    for candidate, score in zip(window, scores, strict=True):
        candidate.rerank = float(score)
    return None

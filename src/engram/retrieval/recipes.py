"""Named retrieval presets, used by the ablation benchmarks. Tweak with ``preset.but(...)``."""

from __future__ import annotations

from engram.retrieval.config import RetrievalConfig

# The full pipeline: BM25 + dense, RRF, cross-encoder over the window, then the multipliers.
FULL = RetrievalConfig()
# Each leg alone, no reranker, no multipliers: what one retriever does on its own.
BM25_ONLY = RetrievalConfig(legs=("bm25",), rerank=False, multipliers=False)
DENSE_ONLY = RetrievalConfig(legs=("dense",), rerank=False, multipliers=False)
# Both legs fused by RRF, nothing after.
HYBRID = RetrievalConfig(rerank=False, multipliers=False)
# Fused and reranked, but no decay / use-count / catalog prior.
HYBRID_RERANK = RetrievalConfig(multipliers=False)

# The default plus the playbook success prior (off by default: it cost MRR in the evaluation).
WITH_FEEDBACK = RetrievalConfig(procedural_feedback=True)

ABLATION = {
    "bm25": BM25_ONLY,
    "dense": DENSE_ONLY,
    "hybrid": HYBRID,
    "hybrid+rerank": HYBRID_RERANK,
    "hybrid+rerank+scoring": FULL,
    "hybrid+rerank+scoring+feedback": WITH_FEEDBACK,
}

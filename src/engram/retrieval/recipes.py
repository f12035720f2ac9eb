"""Named retrieval presets, used by the ablation benchmarks. Tweak with ``preset.but(...)``."""

from __future__ import annotations

from engram.retrieval.config import RetrievalConfig

# The full pipeline: BM25 + dense, RRF, late interaction, cross-encoder over the window, multipliers.
FULL = RetrievalConfig()
# Each leg alone, no model stage, no multipliers: what one retriever does on its own.
BM25_ONLY = RetrievalConfig(legs=("bm25",), late_interaction=False, rerank=False, multipliers=False)
DENSE_ONLY = RetrievalConfig(legs=("dense",), late_interaction=False, rerank=False, multipliers=False)
# Both legs fused by RRF, nothing after.
HYBRID = RetrievalConfig(late_interaction=False, rerank=False, multipliers=False)
# Fused, then re-ordered by late interaction (ColBERT MaxSim over stored token vectors).
HYBRID_LATE = RetrievalConfig(rerank=False, multipliers=False)
# Fused and reranked by the cross-encoder alone (Engram 0.1's stages), no multipliers.
HYBRID_RERANK = RetrievalConfig(late_interaction=False, multipliers=False)
# Fused, late interaction, cross-encoder; no decay / use-count / catalog prior.
HYBRID_LATE_RERANK = RetrievalConfig(multipliers=False)

# The default plus the playbook success prior (off by default: it cost MRR in the evaluation).
WITH_FEEDBACK = RetrievalConfig(procedural_feedback=True)

ABLATION = {
    "bm25": BM25_ONLY,
    "dense": DENSE_ONLY,
    "hybrid": HYBRID,
    "hybrid+rerank": HYBRID_RERANK,
    "hybrid+late": HYBRID_LATE,
    "hybrid+late+rerank": HYBRID_LATE_RERANK,
    "hybrid+late+rerank+scoring": FULL,
    "hybrid+late+rerank+scoring+feedback": WITH_FEEDBACK,
}

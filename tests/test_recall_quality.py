"""Recall quality smoke test: a small hand-written corpus, paraphrased questions, real models.

Thresholds keep the margin of tests/retrieval/conftest.py: at least two questions (of 24) below what
both an AVX-512 VNNI machine and an AVX2 one (qemu -cpu EPYC-Rome) measure, since the INT8 models'
scores, and so near-tie orders, differ with the CPU's kernels."""

from pathlib import Path

import pytest

from engram.eval.corpus import load_corpus
from engram.eval.runner import run_questions
from engram.retrieval import recipes

CORPUS = Path(__file__).parent / "data" / "smoke_corpus.json"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, embedder, reranker, token_encoder):
    from engram import Engram
    from engram.settings import EngramSettings
    from engram.storage.sqlite import SQLiteStore

    eng = Engram(
        SQLiteStore(tmp_path_factory.mktemp("q") / "q.db"),
        embedder,
        reranker,
        token_encoder=token_encoder,
        settings=EngramSettings(),
    )
    questions, ids = load_corpus(eng, CORPUS)
    yield eng, questions, ids
    eng.close()


def test_full_pipeline_finds_the_gold_memories(loaded):
    eng, questions, _ = loaded
    result = run_questions(eng, questions)
    print({k: v for k, v in result.items() if k not in ("misses", "per_type", "per_kind")})
    assert result["foreign_hits"] == 0
    # Measured (AVX-512 VNNI / AVX2): R@5 and R@10 0.958 / 0.958 (one question misses), MRR 0.917 / 0.882.
    assert result["r_at_5"] >= 0.875
    assert result["r_at_10"] >= 0.875
    assert result["mrr"] >= 0.75


def test_hybrid_beats_either_leg_alone(loaded):
    eng, questions, _ = loaded
    hybrid = run_questions(eng, questions, recipes.HYBRID)
    bm25 = run_questions(eng, questions, recipes.BM25_ONLY)
    dense = run_questions(eng, questions, recipes.DENSE_ONLY)
    # Measured, the same on AVX-512 VNNI and AVX2 (these stages rank by cosine and BM25 alone):
    # R@10 1.0 for both (hybrid's worst gold at rank 7), MRR hybrid 0.853, BM25 0.479, dense 0.874.
    assert hybrid["r_at_10"] >= max(bm25["r_at_10"], dense["r_at_10"])
    assert hybrid["mrr"] > bm25["mrr"] + 0.2
    # On 24 paraphrased questions BM25 rarely adds a first place; here it moves one gold from first to
    # second (MRR -0.5/24). Allowed: two more such moves.
    assert hybrid["mrr"] >= dense["mrr"] - 1.5 / len(questions)
    reranked = run_questions(eng, questions, recipes.HYBRID_RERANK)
    assert reranked["r_at_1"] > hybrid["r_at_1"]  # 21 vs 19 first places on both CPUs


def test_current_state_beats_superseded_history(loaded):
    eng, _, ids = loaded
    hits = eng.for_user("nadia").recall("which city do I live in?", memory_types=["semantic"])
    assert hits[0].memory.id == ids["f_leith"]  # cross-encoder 0.0058 vs 0.0002: logits 3.4 apart
    assert ids["f_glasgow"] not in [h.memory.id for h in hits]
    omar = eng.for_user("omar").recall("which city do I live in?")
    assert {h.memory.id for h in omar[:2]} == {ids["o_glasgow"], ids["o_bike"]}  # 0.23, 0.009 vs < 1e-4
    assert all(h.memory.user_id in ("omar", None) for h in omar)

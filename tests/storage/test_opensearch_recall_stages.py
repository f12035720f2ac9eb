"""A recall on OpenSearch runs every stage of the default pipeline: the legs, late interaction over the
token vectors the candidates' search brought back, and the cross-encoder, with no stage skipped or
failed (explain has no ``*_error`` key and no "skipped" note). docs/benchmarks.md once showed the
rerank column no slower than the no-rerank one on OpenSearch; this is the check that it was not a
stage silently not running (it was the order the columns ran in: see "The rerank column on
OpenSearch" there)."""

from __future__ import annotations

import pytest

from engram import Engram
from tests.conftest import make_store


@pytest.fixture
def eng(request, tmp_path, embedder, reranker, token_encoder):
    e = Engram(make_store("opensearch", tmp_path, request), embedder, reranker, token_encoder=token_encoder)
    yield e
    e.close()


def test_a_recall_on_opensearch_runs_late_interaction_and_the_cross_encoder(eng):
    you = eng.for_user("sarah")
    you.write("Sarah is allergic to penicillin")
    you.write("Sarah's dog is called Biscuit")
    you.remember_turn("I had a rash after the amoxicillin last spring", session_id="health")
    you.remember_turn("the doctor said it was the antibiotic", session_id="health")
    whole = eng.config.but(rerank_gap_distilled=1.0)  # every place of the window contested
    hits = you.recall("which antibiotics should Sarah avoid?", record_use=False, config=whole)
    assert hits and "penicillin" in hits[0].memory.text
    for hit in hits:
        assert not [k for k in hit.explain if k.endswith("_error")], hit.explain
        assert not isinstance(hit.explain["rerank"], str), hit.explain["rerank"]  # no "skipped: ..."
        assert hit.explain["late_interaction"] is not None
    assert all(isinstance(h.explain["rerank"], float) for h in hits)
    assert hits[0].explain["relevance"] == "rerank"
    leader = you.recall("which antibiotics should Sarah avoid?", record_use=False)[0]
    assert leader.memory.id == hits[0].memory.id and leader.explain["relevance"] == "rerank"  # always scored

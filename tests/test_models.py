"""The packaged models: checksums verified at load, clear errors, model identity pinned per store."""

import shutil

import numpy as np
import pytest

from engram import Engram, ModelError
from engram.providers.onnx import (
    PACKAGED_COLBERT,
    PACKAGED_EMBEDDER,
    PACKAGED_RERANKER,
    OnnxEmbedder,
    verify_files,
)
from engram.storage.sqlite import SQLiteStore


def test_packaged_files_match_their_checksums():
    for spec in (PACKAGED_EMBEDDER, PACKAGED_RERANKER, PACKAGED_COLBERT):
        assert spec.verified_dir() == spec.locate()


def test_a_corrupt_or_missing_file_is_a_clear_error(tmp_path):
    src = PACKAGED_EMBEDDER.locate()
    shutil.copy(src / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(ModelError, match=r"model\.onnx is missing"):
        verify_files(tmp_path, PACKAGED_EMBEDDER.sha256, "bge")
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="checksum"):
        verify_files(tmp_path, PACKAGED_EMBEDDER.sha256, "bge")


def test_embeddings_are_normalised_and_meaningful(embedder):
    docs = embedder.embed_documents(["Sarah moved to Edinburgh", "The hub firmware is 2.1", "café naïve"])
    assert docs.shape == (3, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    q = embedder.embed_query("where does sarah live now?")
    assert q @ docs[0] > q @ docs[1] + 0.2
    again = embedder.embed_documents(["The hub firmware is 2.1", "Sarah moved to Edinburgh"])
    # INT8 dynamic quantisation lets batch-mates nudge a vector; the nudge stays far below any signal.
    assert again[1] @ docs[0] > 0.99


def test_reranker_scores_are_stable_and_sensible(reranker):
    passages = ["Sarah moved to Edinburgh", "Sarah's dog chews cables", "Edinburgh is in Scotland"]
    alone = [reranker.score("where does sarah live", [p])[0] for p in passages]
    together = reranker.score("where does sarah live", passages)
    assert alone == together  # batch-mates never shift a score
    assert together[0] > 0.5 > together[1]


def test_a_long_passage_is_scored_by_its_best_window(reranker):
    """An outside review's repro: the answer after ~1,800 characters of chatter scored 0.003 read whole
    (cut at the model's budget, or diluted by the rest); in windows the one holding it decides."""
    chatter = (
        "Yesterday was a long day. I had meetings all morning about the quarterly planning, then lunch "
        "with the team at the Italian place near the office, then a couple of hours on code review. "
    ) * 10
    query, answer = "what is my passport number?", "Oh and by the way, my passport number is ZX99123."
    short = [answer, "my hub shows E-4021 since the update"]
    assert reranker.score(query, short) == [reranker.score(query, [p])[0] for p in short]  # whole, alone
    first, last, unrelated = reranker.score(query, [answer + " " + chatter, chatter + answer, chatter])
    assert first > 0.5 and last > 0.5 and unrelated < 0.01, (first, last, unrelated)


def test_store_refuses_a_different_embedding_model(tmp_path, embedder, reranker):
    Engram(SQLiteStore(tmp_path / "a.db"), embedder, reranker).close()
    other = OnnxEmbedder(PACKAGED_EMBEDDER.locate(), name="some-other-model")
    with pytest.raises(ModelError, match=r"was built with embedding model 'bge-small-en-v1\.5-int8'"):
        Engram(SQLiteStore(tmp_path / "a.db"), other, reranker)

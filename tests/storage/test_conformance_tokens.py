"""Token-vector formats on every Store backend (the ``store`` fixture): a store written by Engram 0.1
(legacy int8 blobs, or none) keeps answering; with ``lean_token_vectors`` new writes are lean (version
2) and ``reindex`` converts the rest, version-1 lean blobs included; without it (the default) writes
are int8, and reindex converts back."""

from __future__ import annotations

import pytest

from engram import Engram
from engram.models import CatalogItem, new_id, search_text_of
from engram.retrieval import token_pq
from engram.retrieval.late_interaction import pack
from engram.retrieval.token_format import LEAN, encode_lean, is_lean
from engram.settings import load_settings
from tests.storage.test_conformance import T0, episode

OLD_TEXTS = [
    "Sarah's garage sensor runs on a CR2032 coin cell",
    "Sarah walked the dog along the canal on Sunday",
    "Sarah's sister Priya moved to Leeds in March",
    "Sarah painted the kitchen a pale green",
]


@pytest.fixture(params=[True], ids=["lean"])
def eng(request, store, embedder, token_encoder):
    assert token_encoder.name == LEAN.model  # the packaged model: the one the lean codebook fits
    settings = load_settings(lean_token_vectors=request.param)
    engram = Engram(store, embedder, None, token_encoder=token_encoder, settings=settings)
    yield engram
    engram.use_counts.close()  # the store fixture closes the store


def write_as_engram_0_1(eng, tenant, rows, tokens=True):
    """Rows inserted the way an older Engram did: legacy int8 token vectors, or none."""
    texts = [search_text_of(r) for r in rows]
    blobs = [pack(m) for m in eng.token_encoder.encode_documents(texts)] if tokens else None
    eng.store.insert(tenant, rows, eng.embedder.embed_documents(texts), None, blobs)


def test_one_recall_scores_legacy_and_lean_rows_and_reindex_converts_the_legacy_ones(eng):
    store = eng.store
    old = [episode("sarah", t) for t in OLD_TEXTS]
    write_as_engram_0_1(eng, "sarah", old)
    bare = [episode("sarah", "Sarah's doorbell chimes twice when the battery is low")]
    write_as_engram_0_1(eng, "sarah", bare, tokens=False)
    item = CatalogItem(
        id=new_id("catalog"), text="Hub v2 sensors take a CR2032 cell", user_id=None, created_at=T0
    )
    write_as_engram_0_1(eng, None, [item])
    mem = eng.for_user("sarah")
    new = mem.write("Sarah's hallway sensor takes two AAA batteries")
    ids = [r.id for r in old] + [new.id]
    blobs = store.token_vectors("sarah", ids)
    assert [is_lean(blobs[i]) for i in ids] == [False] * len(old) + [True]
    assert len(blobs[new.id]) < len(blobs[old[0].id]) / 4

    question = "which battery does the garage sensor take?"
    hits = mem.recall(question, k=4)
    assert {old[0].id, new.id} <= {h.memory.id for h in hits}
    assert hits[0].memory.id == old[0].id  # a legacy row still wins on its own words
    assert all(h.explain["late_interaction"] is not None for h in hits)
    assert "late_interaction_error" not in hits[0].explain

    # A run stopped halfway: one legacy row already rewritten. The next run does only the rest, and
    # rewrites a version-1 lean blob (what lean stores wrote before version 2) too.
    old_matrices = eng.token_encoder.encode_documents(OLD_TEXTS[1:3])
    store.set_tokens("sarah", {old[1].id: pack(old_matrices[0], LEAN.model)})
    store.set_tokens("sarah", {old[2].id: encode_lean(old_matrices[1])})
    assert mem.recall(question, k=4)[0].memory.id == old[0].id  # one recall reads all three formats
    assert eng.reindex(batch=2) == len(old) - 1 + len(bare) + 1  # + the catalog item
    blobs = store.token_vectors("sarah", [*ids, bare[0].id, item.id])
    assert len(blobs) == len(ids) + 2 and all(b[0] == token_pq.VERSION and is_lean(b) for b in blobs.values())
    assert eng.reindex() == 0  # nothing left: a second run rewrites nothing
    again = mem.recall(question, k=4)
    assert {old[0].id, new.id} == {h.memory.id for h in again[:2]}  # the two battery rows lead
    assert all(h.explain["late_interaction"] is not None for h in again)


@pytest.mark.parametrize("eng", [False], ids=["int8"], indirect=True)
def test_by_default_writes_are_int8_and_reindex_converts_lean_rows_back(eng):
    mem = eng.for_user("sarah")
    plain = mem.write("Sarah's hallway sensor takes two AAA batteries")
    lean_row = mem.write("Sarah's garage sensor runs on a CR2032 coin cell")
    lean = pack(eng.token_encoder.encode_documents([lean_row.text])[0], LEAN.model)
    eng.store.set_tokens("sarah", {lean_row.id: lean})  # as a store with the setting on wrote it
    assert not is_lean(eng.store.token_vectors("sarah", [plain.id])[plain.id])
    assert eng.reindex() == 1
    blobs = eng.store.token_vectors("sarah", [plain.id, lean_row.id])
    assert not any(is_lean(b) for b in blobs.values())
    assert mem.recall("which battery does the garage sensor take?", k=1)[0].memory.id == lean_row.id

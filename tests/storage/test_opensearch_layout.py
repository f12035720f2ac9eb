"""The OpenSearch memories index keeps each row's embedding once, as its k-NN vector, not also as JSON in
``_source`` (mapping version 4, k-NN derived source): every path that rewrites a document from what it
read must still leave the row findable by its vector, and a store made before (version 3, embedding
in ``_source``) is migrated to it."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from engram.models import EpisodicMemory, Tombstone, new_id, search_text_of
from engram.storage.base import ConsolidationWrite, SearchFilter, Supersession
from engram.storage.opensearch import MAPPING_VERSION, migrate
from engram.storage.opensearch._layout import KINDS, index_body
from tests.conftest import opened_store
from tests.storage.test_opensearch_migrate import aliased, ok, open_store, options_for
from tests.storage.test_opensearch_writes import T0, fact, put

EVERYTHING = SearchFilter(
    frozenset({"episodic", "semantic", "procedural", "catalog"}), include_superseded=True
)


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)


def turn(user, text, **kw):
    return EpisodicMemory(id=new_id("episodic"), text=text, user_id=user, created_at=T0, timestamp=T0, **kw)


def found_by_own_vector(store, tenant, rows, vectors):
    """Each row is the dense leg's first hit for its own vector, at cosine ~1."""
    for row, vector in zip(rows, vectors, strict=True):
        hits = store.search_vector(tenant, vector, EVERYTHING, 1)
        assert [h.id for h in hits] == [row.id], row.text
        assert hits[0].score == pytest.approx(1.0, abs=1e-4), row.text


def stored_embedding(node, index, doc_id):
    return ok(node.request("GET", f"/{index}/_doc/{doc_id}"))["_source"]["embedding"]


def test_every_rewrite_keeps_the_row_findable_by_its_vector(store, embedder, opensearch_node):
    """Supersession, a recorded use, consolidation marking its episodes, new token vectors, a forget
    clearing a quote and repair clearing one: each rewrites documents from their _source, which no
    longer stores the embedding; the k-NN plugin puts it back, so the rewritten rows keep it."""
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    said = put(store, embedder, "sarah", turn("sarah", "we moved to the coast last spring"))
    reply = put(store, embedder, "sarah", turn("sarah", "the flat has a sea view", context_id=said.id))
    gone = turn("sarah", "my old neighbour was loud")
    quoting = put(store, embedder, "sarah", turn("sarah", "and his dog barked all night"))
    new = fact("sarah", "Sarah lives in Leith", supersedes=old.id)
    at = T0 + timedelta(days=1)
    put(store, embedder, "sarah", new, supersede={new.id: Supersession(old.id, retract=False, at=at)})
    assert store.fetch("sarah", [old.id])[0].superseded_by == new.id  # rewritten: superseded
    assert store.record_use("sarah", {new.id: 2}, at) == {new.id: 2}  # rewritten: its use count
    store.apply_consolidation(  # rewritten: the turns marked consolidated
        "sarah", ConsolidationWrite([], np.zeros((0, embedder.dim), np.float32), {}, [], [], [said.id], at)
    )
    store.set_tokens("sarah", {reply.id: b"\x01" * 67})  # rewritten: new token vectors
    store.forget("sarah", said.id, at)  # rewritten: the reply's quote of the forgotten turn cleared
    assert store.fetch("sarah", [reply.id])[0].context_id is None
    # a turn quoting a turn forgotten meanwhile (what a killed forget leaves): repair rewrites it
    store.add_tombstones(
        "sarah",
        [Tombstone(id=gone.id, user_id="sarah", memory_type="episodic", created_at=T0, forgotten_at=at)],
    )
    index = store.names.memories
    source = ok(opensearch_node.request("GET", f"/{index}/_doc/{quoting.id}"))["_source"]
    source.update(context_id=gone.id, attrs=dict(source["attrs"], context_id=gone.id, context=gone.text))
    ok(opensearch_node.request("PUT", f"/{index}/_doc/{quoting.id}?refresh=true", source))
    assert store.repair()["quotes_cleared"] == 1
    assert store.fetch("sarah", [quoting.id])[0].context_id is None

    rows = [old, new, reply, quoting]
    vectors = [embedder.embed_documents([search_text_of(r)])[0] for r in rows]  # as ``put`` embedded them
    found_by_own_vector(store, "sarah", rows, vectors)
    for row, vector in zip(rows, vectors, strict=True):  # read back whole, as a rewrite reads it
        assert stored_embedding(opensearch_node, index, row.id) == pytest.approx(list(vector), abs=1e-6)


def v3_body(kind: str) -> dict:
    """Version 3's mapping: the embedding kept in ``_source`` beside its k-NN field."""
    body = index_body(kind, 384, 1, 0)
    body["mappings"]["_meta"]["engram_mapping_version"] = 3
    if kind == "memories":
        del body["settings"]["index"]["knn.derived_source.enabled"]
        del body["mappings"]["properties"]["embedding"]["doc_values"]
    return body


def test_migrating_to_4_keeps_every_vector_and_drops_it_from_the_stored_source(
    opensearch_node, os_prefixes, embedder
):
    node, prefix = opensearch_node, os_prefixes()
    store = open_store(node, prefix)
    store.ensure_model(embedder.name, embedder.dim)
    rows = [fact("sarah", "Sarah's bike is red"), fact("bob", "Bob's bike is blue")]
    vectors = [embedder.embed_documents([search_text_of(r)])[0] for r in rows]
    for row, vector in zip(rows, vectors, strict=True):
        store.insert(row.user_id, [row], vector[None, :])
    store.close()
    for kind in KINDS:  # the store as version 3 wrote it
        ok(node.request("PUT", f"/{prefix}{kind}-v3", v3_body(kind)))
        copy = {
            "source": {"index": f"{prefix}{kind}-v{MAPPING_VERSION}"},
            "dest": {"index": f"{prefix}{kind}-v3"},
        }
        assert ok(node.request("POST", "/_reindex?refresh=true", copy))["failures"] == []
        ok(node.request("DELETE", f"/{prefix}{kind}-v{MAPPING_VERSION}"))
        alias = {"actions": [{"add": {"index": f"{prefix}{kind}-v3", "alias": f"{prefix}{kind}"}}]}
        ok(node.request("POST", "/_aliases", alias))
    old = f"{prefix}memories-v3"
    assert stored_embedding(node, old, rows[0].id) == pytest.approx(list(vectors[0]), abs=1e-6)

    done = migrate(f"opensearchs://{node.address}", options_for(node, prefix))

    assert {(m.kind, m.from_version) for m in done} == {(kind, 3) for kind in KINDS}
    new = f"{prefix}memories-v{MAPPING_VERSION}"
    assert aliased(node, prefix)[new] == [f"{prefix}memories"]
    settings = ok(node.request("GET", f"/{new}/_settings?flat_settings=true"))[new]["settings"]
    assert settings["index.knn.derived_source.enabled"] == "true"
    store = open_store(node, prefix)
    try:
        for row, vector in zip(rows, vectors, strict=True):
            assert stored_embedding(node, new, row.id) == pytest.approx(list(vector), abs=1e-6)
            found_by_own_vector(store, row.user_id, [row], [vector])
    finally:
        store.close()
    # the next version's migration copies from version 4 the same way: the vectors come along
    ok(node.request("PUT", f"/{prefix}next", index_body("memories", 384, 1, 0)))
    copy = {"source": {"index": new}, "dest": {"index": f"{prefix}next"}}
    assert ok(node.request("POST", "/_reindex?refresh=true", copy))["failures"] == []
    knn = {"knn": {"embedding": {"vector": [float(x) for x in vectors[1]], "k": 1}}}
    hits = ok(node.request("POST", f"/{prefix}next/_search", {"size": 1, "query": knn}))["hits"]["hits"]
    assert [h["_id"] for h in hits] == [rows[1].id]
    assert hits[0]["_source"]["embedding"] == pytest.approx(list(vectors[1]), abs=1e-6)

"""Migrating an OpenSearch store between mapping versions (engram.storage.opensearch.migrate).

The "old version" is made here: a store written through Engram (two tenants, the catalog, a tombstone,
an API key) is moved onto ``{prefix}{kind}-v0`` indices with an older mapping (``_meta`` version 0, and
``search_text`` with the standard analyzer where v1 stems with the english one, and Lucene's BM25
where v2 scores with Engram's per-owner statistics), its aliases pointing at them. Migrating must bring
every document back behind the current version's aliases and mapping, readable through the Store API
with isolation intact, once (a second run changes nothing), and never down.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram import Engram
from engram.errors import StorageError
from engram.storage.base import ApiKeyRecord
from engram.storage.opensearch import MAPPING_VERSION, OpenSearchOptions, OpenSearchStore, _migrate, migrate
from engram.storage.opensearch._layout import KINDS, index_body
from tests.conftest import opensearch_options
from tests.opensearch_node.node import OpenSearchNode


def options_for(node: OpenSearchNode, prefix: str) -> OpenSearchOptions:
    options = {k.removeprefix("os_"): v for k, v in opensearch_options(node, prefix).items()}
    return OpenSearchOptions(**options)  # type: ignore[arg-type]


def open_store(node: OpenSearchNode, prefix: str) -> OpenSearchStore:
    return OpenSearchStore(f"opensearchs://{node.address}", options_for(node, prefix))


def ok(answer: tuple[int, object]) -> dict:
    status, body = answer
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def v0_body(kind: str) -> dict:
    """The older mapping: version 0 in ``_meta``, and no stemming of the keyword text."""
    body = index_body(kind, 384, 1, 0)
    body["mappings"]["_meta"]["engram_mapping_version"] = 0
    if kind == "memories":
        body["mappings"]["properties"]["search_text"] = {"type": "text", "analyzer": "standard"}
    return body


def downgrade_to_v0(node: OpenSearchNode, prefix: str, body=v0_body) -> None:
    """Move a current store onto ``-v0`` indices of ``body``'s mapping, its aliases pointing at them."""
    for kind in KINDS:
        ok(node.request("PUT", f"/{prefix}{kind}-v0", body(kind)))
        current = f"{prefix}{kind}-v{MAPPING_VERSION}"
        copy = {"source": {"index": current}, "dest": {"index": f"{prefix}{kind}-v0"}}
        assert ok(node.request("POST", "/_reindex?refresh=true", copy))["failures"] == []
        ok(node.request("DELETE", f"/{current}"))
        ok(
            node.request(
                "POST",
                "/_aliases",
                {"actions": [{"add": {"index": f"{prefix}{kind}-v0", "alias": f"{prefix}{kind}"}}]},
            )
        )


def aliased(node: OpenSearchNode, prefix: str) -> dict[str, list[str]]:
    found = ok(node.request("GET", f"/{prefix}*/_alias"))  # every index of the prefix, aliased or not
    return {index: sorted(v["aliases"]) for index, v in sorted(found.items())}


def counts(node: OpenSearchNode, prefix: str) -> dict[str, object]:
    """Documents by index kind, by owner (memories, tombstones) and by kind (store), through the aliases."""
    out: dict[str, object] = {}
    for kind, field in (("memories", "owner"), ("tombstones", "owner"), ("store", "kind")):
        query = {"size": 0, "aggs": {"by": {"terms": {"field": field, "size": 100}}}}
        found = ok(node.request("POST", f"/{prefix}{kind}/_search", query))
        out[kind] = {b["key"]: b["doc_count"] for b in found["aggregations"]["by"]["buckets"]}
    return out


@pytest.fixture
def old_store(opensearch_node, os_prefixes, embedder, reranker, token_encoder):
    """A store with two tenants, the catalog, a tombstone and an API key, moved onto v0 indices."""
    prefix = os_prefixes()
    eng = Engram(open_store(opensearch_node, prefix), embedder, reranker, token_encoder=token_encoder)
    sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
    rows = {
        "sarah": sarah.write("Sarah's locker code is 4411"),
        "bob": bob.write("Bob's locker code is 9931"),
        "bob_turn": bob.remember_turn("my locker sticks in the morning"),
        "catalog": eng.catalog.add("Lockers open with a four digit code", title="Lockers"),
    }
    bob.forget(rows["bob_turn"].id)
    now = datetime.now(UTC)
    eng.store.add_key(ApiKeyRecord(id="key1", user_id="sarah", label="l", created_at=now), "hash1")
    eng.close()
    before = counts(opensearch_node, prefix)
    downgrade_to_v0(opensearch_node, prefix)
    assert counts(opensearch_node, prefix) == before
    return prefix, rows, before


def test_migrate_moves_an_old_store_to_the_current_version_once(
    opensearch_node, old_store, embedder, reranker, token_encoder
):
    node = opensearch_node
    prefix, rows, before = old_store
    url = f"opensearchs://{node.address}"
    with pytest.raises(StorageError, match="mapping version 0") as refused:
        open_store(node, prefix)
    # the refusal names exactly what to run
    assert (
        f"from engram.storage.opensearch import migrate; print(migrate('{url}', index_prefix='{prefix}'))"
        in str(refused.value)
    )
    # before: recall through the v0 mapping does not stem ("lockers" misses "locker")
    stemmed = {"query": {"match": {"search_text": "lockers"}}}
    assert ok(node.request("POST", f"/{prefix}memories/_count", stemmed))["count"] == 1  # the catalog's

    done = migrate(url, options_for(node, "ignored-"), index_prefix=prefix)

    assert {(m.kind, m.from_version, m.to_version, m.old_deleted) for m in done} == {
        (kind, 0, MAPPING_VERSION, False) for kind in KINDS
    }
    assert sum(m.documents for m in done) == sum(sum(c.values()) for c in before.values())  # type: ignore[union-attr]
    after = aliased(node, prefix)
    assert after == {
        **{f"{prefix}{kind}-v0": [] for kind in KINDS},  # kept for the operator, read-only
        **{f"{prefix}{kind}-v{MAPPING_VERSION}": [f"{prefix}{kind}"] for kind in KINDS},
    }
    assert counts(node, prefix) == before
    current = f"{prefix}memories-v{MAPPING_VERSION}"
    mapping = ok(node.request("GET", f"/{prefix}memories/_mapping"))[current]["mappings"]
    assert mapping["_meta"]["engram_mapping_version"] == MAPPING_VERSION
    assert mapping["properties"]["search_text"]["analyzer"] == "english"
    assert mapping["properties"]["search_text"]["similarity"] == "engram_bm25"  # version 2
    assert ok(node.request("POST", f"/{prefix}memories/_count", stemmed))["count"] == 3  # re-analysed
    old = ok(node.request("GET", f"/{prefix}memories-v0/_settings"))[f"{prefix}memories-v0"]
    assert old["settings"]["index"]["blocks"]["write"] == "true"

    # the Store API on the migrated store: recall, isolation, keys
    eng = Engram(open_store(node, prefix), embedder, reranker, token_encoder=token_encoder)
    try:
        sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
        seen = {h.memory.id for h in sarah.recall("locker code", record_use=False)}
        assert seen == {rows["sarah"].id, rows["catalog"].id}
        seen = {h.memory.id for h in bob.recall("locker code", record_use=False)}
        assert seen == {rows["bob"].id, rows["catalog"].id}
        assert [t.id for t in eng.store.tombstones("bob")] == [rows["bob_turn"].id]
        assert eng.store.tombstones("sarah") == []
        assert eng.store.find_key("hash1") is not None
        assert sarah.write("Sarah's bike is blue").id  # writes go to the current version
    finally:
        eng.close()

    # a second run changes nothing
    indices = aliased(node, prefix)
    assert migrate(url, options_for(node, prefix)) == []
    assert aliased(node, prefix) == indices


def test_migrate_refuses_to_go_down_and_changes_nothing(opensearch_node, os_prefixes):
    node = opensearch_node
    prefix = os_prefixes()
    open_store(node, prefix).close()  # tombstones and store at the current version
    newer = MAPPING_VERSION + 1
    ok(node.request("PUT", f"/{prefix}memories-v{newer}", {"aliases": {f"{prefix}memories": {}}}))
    before = aliased(node, prefix)
    with pytest.raises(StorageError, match=rf"cannot migrate down: .*memories is at v{newer}"):
        migrate(f"opensearchs://{node.address}", options_for(node, prefix))
    assert aliased(node, prefix) == before
    with pytest.raises(StorageError, match=rf"mapping version {newer}, newer .*: upgrade Engram"):
        open_store(node, prefix)


def test_no_store_yet_is_nothing_to_migrate(opensearch_node, os_prefixes):
    prefix = os_prefixes()
    assert migrate(f"opensearchs://{opensearch_node.address}", options_for(opensearch_node, prefix)) == []
    assert aliased(opensearch_node, prefix) == {}


def memories_v0(node: OpenSearchNode, prefix: str) -> None:
    """Only a memories index at v0, without ``has_tokens``, two documents: one with tokens."""
    body = v0_body("memories")
    del body["mappings"]["properties"]["has_tokens"]
    body["aliases"] = {f"{prefix}memories": {}}
    ok(node.request("PUT", f"/{prefix}memories-v0", body))
    for doc_id, tokens in (("a", "AAAA"), ("b", None)):
        doc = {"id": doc_id, "owner": "sarah", "memory_type": "semantic", "rid": 1, "embedding": [0.1] * 384}
        if tokens:
            doc["tokens"] = tokens
        status, _ = node.request("PUT", f"/{prefix}memories-v0/_doc/{doc_id}?refresh=true", doc)
        assert status == 201


def test_a_step_script_runs_in_the_copy_and_writes_meanwhile_are_refused(
    opensearch_node, os_prefixes, monkeypatch
):
    node = opensearch_node
    prefix = os_prefixes()
    memories_v0(node, prefix)
    monkeypatch.setitem(
        _migrate.STEPS, 1, {"memories": "ctx._source.has_tokens = ctx._source.tokens != null"}
    )
    during: list[tuple[int, object]] = []
    copy = _migrate._Migration._copy

    def copy_with_a_write(self, plan):  # a writer that was not stopped, while the copy runs
        doc = {"id": "c", "owner": "sarah", "memory_type": "semantic", "rid": 2, "embedding": [0.2] * 384}
        during.append(node.request("PUT", f"/{prefix}memories/_doc/c", doc, user="svc"))
        return copy(self, plan)

    monkeypatch.setattr(_migrate._Migration, "_copy", copy_with_a_write)
    done = migrate(f"opensearchs://{node.address}", options_for(node, prefix), delete_old=True)
    assert [(m.kind, m.documents, m.old_deleted) for m in done] == [("memories", 2, True)]
    current = f"{prefix}memories-v{MAPPING_VERSION}"
    assert aliased(node, prefix) == {current: [f"{prefix}memories"]}  # v0 deleted
    assert during[0][0] == 403 and "cluster_block_exception" in str(during[0][1])  # refused, not lost
    for doc_id, has in (("a", True), ("b", False)):
        assert ok(node.request("GET", f"/{prefix}memories/_doc/{doc_id}"))["_source"]["has_tokens"] is has


def test_a_failed_copy_leaves_the_old_store_as_it_was(opensearch_node, os_prefixes, monkeypatch):
    node = opensearch_node
    prefix = os_prefixes()
    memories_v0(node, prefix)
    monkeypatch.setitem(
        _migrate.STEPS, 1, {"memories": "ctx._source.missing.field = 1"}
    )  # a null dereference
    with pytest.raises(StorageError, match="reindex"):
        migrate(f"opensearchs://{node.address}", options_for(node, prefix))
    assert aliased(node, prefix) == {f"{prefix}memories-v0": [f"{prefix}memories"]}  # no new index left
    settings = ok(node.request("GET", f"/{prefix}memories-v0/_settings"))[f"{prefix}memories-v0"]["settings"]
    assert settings["index"].get("blocks", {}).get("write") in (None, "false")  # writers let in again


def test_an_interrupted_migration_is_named_not_overwritten(opensearch_node, os_prefixes):
    node = opensearch_node
    prefix = os_prefixes()
    memories_v0(node, prefix)
    new = f"{prefix}memories-v{MAPPING_VERSION}"
    ok(node.request("PUT", f"/{new}", {}))  # what a killed migration leaves
    with pytest.raises(StorageError, match=rf"index {new} exists .* delete {new}"):
        migrate(f"opensearchs://{node.address}", options_for(node, prefix))
    assert ok(node.request("GET", f"/{prefix}memories-v0/_count"))["count"] == 2


def test_step_scripts_compose_in_version_order(monkeypatch):
    monkeypatch.setattr(_migrate, "STEPS", {2: {"store": "a"}, 3: {"memories": "b"}, 4: {"store": "c"}})
    assert (
        _migrate.step_script("store", 1, 4)
        == "void v2(Map ctx) { a }\nvoid v4(Map ctx) { c }\nv2(ctx); v4(ctx);"
    )
    assert _migrate.step_script("store", 2, 4) == "void v4(Map ctx) { c }\nv4(ctx);"
    assert _migrate.step_script("tombstones", 0, 4) is None


def test_migrating_to_3_derives_the_recall_filter_fields_as_new_writes_have_them(
    opensearch_node, os_prefixes, embedder, reranker, token_encoder
):
    """Version 3's step (painless) derives session_id, event_time and metadata_terms from documents
    written before them, exactly as _documents.document does for new ones; filtered recall then works."""
    node, prefix = opensearch_node, os_prefixes()
    eng = Engram(open_store(node, prefix), embedder, reranker, token_encoder=token_encoder)
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    sarah = eng.for_user("sarah")
    meta = {"ch": "web", "n": 2, "x": 1.5, "big": 2.0, "ok": True, "tags": ["a"], "none": None, "ü": "ß"}
    turn = sarah.remember_turn("the hub lost wifi", at=t0, session_id="s1", metadata=meta)
    other = sarah.remember_turn("the hub lost wifi again", at=t0 + timedelta(days=9), session_id="s2")
    fact = sarah.write("Sarah's hub lost wifi in 1999", valid_from=datetime(1999, 1, 1, tzinfo=UTC))
    eng.close()
    derived = ("session_id", "event_time", "metadata_terms")
    written = {
        h["_id"]: {f: h["_source"].get(f) for f in derived}
        for h in ok(node.request("POST", f"/{prefix}memories/_search", {"size": 10}))["hits"]["hits"]
    }

    def v2_body(kind: str) -> dict:
        body = index_body(kind, 384, 1, 0)
        body["mappings"]["_meta"]["engram_mapping_version"] = 2
        for name in derived:
            body["mappings"]["properties"].pop(name, None)
        return body

    for kind in KINDS:  # the store as version 2 wrote it: without the fields
        ok(node.request("PUT", f"/{prefix}{kind}-v2", v2_body(kind)))
        strip = "".join(f"ctx._source.remove('{f}');" for f in derived)
        copy = {
            "source": {"index": f"{prefix}{kind}-v{MAPPING_VERSION}"},
            "dest": {"index": f"{prefix}{kind}-v2"},
            "script": {"source": strip, "lang": "painless"},
        }
        assert ok(node.request("POST", "/_reindex?refresh=true", copy))["failures"] == []
        ok(node.request("DELETE", f"/{prefix}{kind}-v{MAPPING_VERSION}"))
        ok(
            node.request(
                "POST",
                "/_aliases",
                {"actions": [{"add": {"index": f"{prefix}{kind}-v2", "alias": f"{prefix}{kind}"}}]},
            )
        )

    migrate(f"opensearchs://{node.address}", options_for(node, prefix), delete_old=True)
    migrated = {
        h["_id"]: {f: h["_source"].get(f) for f in derived}
        for h in ok(node.request("POST", f"/{prefix}memories/_search", {"size": 10}))["hits"]["hits"]
    }
    for doc_id, fields in written.items():
        got = migrated[doc_id]
        assert got["session_id"] == fields["session_id"] and sorted(got["metadata_terms"]) == sorted(
            fields["metadata_terms"]
        ), doc_id
        assert datetime.fromisoformat(got["event_time"]) == datetime.fromisoformat(fields["event_time"])
    eng = Engram(open_store(node, prefix), embedder, reranker, token_encoder=token_encoder)
    try:
        sarah = eng.for_user("sarah")
        assert [h.memory.id for h in sarah.recall("hub wifi", session_id="s1")] == [turn.id]
        assert [h.memory.id for h in sarah.recall("hub wifi", metadata={"x": 1.5, "big": 2})] == [turn.id]
        assert [h.memory.id for h in sarah.recall("hub wifi", metadata={"ü": "ß", "ok": True})] == [turn.id]
        recent = sarah.recall("hub wifi", time_from=t0 + timedelta(days=1))
        assert [h.memory.id for h in recent] == [other.id]
        old = sarah.recall("hub wifi", time_to=datetime(2000, 1, 1))
        assert [h.memory.id for h in old] == [fact.id]
    finally:
        eng.close()

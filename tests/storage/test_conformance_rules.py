"""More of the one suite every Store backend must pass: the rules written once in engram.storage._rules
that test_conformance.py did not yet run on every backend (tombstones, the export scan, API keys, use
counts of the catalog, supersession inside a consolidation batch)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from engram.errors import Conflict, InvalidInput, NotFound
from engram.models import SemanticMemory, Tombstone, new_id, search_text_of
from engram.storage.base import (
    CATALOG,
    CATALOG_OWNER,
    CATALOG_SESSION,
    ApiKeyRecord,
    ConsolidationWrite,
    SearchFilter,
    Supersession,
    read_owners,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def fact(user, text, **kw):
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0, **kw)


def put(store, embedder, tenant, *rows):
    store.insert(tenant, list(rows), embedder.embed_documents([search_text_of(r) for r in rows]))
    return rows


def stone(user, memory_type="semantic", days=0):
    return Tombstone(
        id=new_id(memory_type),
        user_id=user,
        memory_type=memory_type,
        created_at=T0,
        forgotten_at=T0 + timedelta(days=days),
    )


def test_the_catalog_names_are_distinct_and_the_migrations_use_them():
    assert CATALOG is None and CATALOG_OWNER == "" and read_owners(CATALOG, True) == [CATALOG_OWNER]
    assert CATALOG_SESSION not in ("", CATALOG_OWNER)  # '' is what an unset setting reads as
    from engram.storage.postgres import MIGRATIONS

    assert f"engram_tenant() = '{CATALOG_SESSION}'" in MIGRATIONS[0][1]


def test_tombstones_are_restored_scoped_and_never_twice(store, embedder):
    older, newer = stone("sarah", days=1), stone("sarah", "episodic", days=2)
    store.add_tombstones("sarah", [newer, older])
    assert [t.id for t in store.tombstones("sarah")] == [older.id, newer.id]  # oldest first
    assert store.tombstones("sarah")[0] == older
    assert store.tombstones("bob") == []
    with pytest.raises(InvalidInput):
        store.add_tombstones("bob", [stone("sarah")])  # not bob's
    with pytest.raises(Conflict):
        store.add_tombstones("sarah", [stone("sarah"), older])
    assert len(store.tombstones("sarah")) == 2  # the failed call wrote nothing
    assert "sarah" in store.tenants()  # a tenant with only tombstones is still a tenant (exports)
    catalog_stone = stone(None, "catalog")
    store.add_tombstones(CATALOG, [catalog_stone])
    assert [t.id for t in store.tombstones(CATALOG)] == [catalog_stone.id]


def test_scan_pages_a_tenant_in_write_order_with_consolidation_marks(store, embedder):
    rows = put(store, embedder, "sarah", *(fact("sarah", f"fact {i}") for i in range(5)))
    put(store, embedder, "bob", fact("bob", "bob's"))
    first = store.scan("sarah", 0, 3)
    rest = store.scan("sarah", first[-1][0], 10)
    assert [m.id for _, m, _ in first + rest] == [r.id for r in rows]
    assert all(state == 0 for _, _, state in first + rest)
    cursors = [c for c, _, _ in first + rest]
    assert cursors == sorted(cursors)


def test_api_keys_are_found_by_hash_listed_and_revoked_once(store):
    admin = ApiKeyRecord(id="k1", user_id=None, label="admin", created_at=T0)
    sarah = ApiKeyRecord(id="k2", user_id="sarah", label="laptop", created_at=T0 + timedelta(seconds=1))
    gone = ApiKeyRecord(
        id="k3", user_id="sarah", label="old", created_at=T0 + timedelta(seconds=2), revoked_at=T0
    )
    for record, key_hash in ((admin, "h1"), (sarah, "h2"), (gone, "h3")):
        store.add_key(record, key_hash)
    assert store.find_key("h2") == sarah and store.find_key("nope") is None
    assert store.get_key("k3") == gone and store.get_key("k9") is None
    assert store.list_keys() == [admin, sarah, gone]
    assert store.list_keys("sarah") == [sarah, gone]
    assert store.export_keys() == [(admin, "h1"), (sarah, "h2"), (gone, "h3")]
    assert store.revoke_key("k2", T0) is True
    assert store.revoke_key("k2", T0 + timedelta(days=1)) is False  # already revoked: unchanged
    assert store.get_key("k2").revoked_at == T0
    assert store.revoke_key("k3", T0) is False
    with pytest.raises(Conflict):
        store.add_key(ApiKeyRecord(id="k4", user_id=None, label="", created_at=T0), "h1")


def test_use_counts_are_only_a_users_and_fetch_keeps_the_order_asked(store, embedder):
    a, b = put(store, embedder, "sarah", fact("sarah", "tea"), fact("sarah", "coffee"))
    assert store.record_use(CATALOG, {a.id: 1}, T0) == {}
    assert store.record_use("sarah", {}, T0) == {}
    assert [m.id for m in store.fetch("sarah", [b.id, "not an id", a.id, b.id])] == [b.id, a.id]
    assert store.fetch("sarah", ["x" * 5000]) == [] and store.token_vectors("sarah", ["'; --"]) == {}
    with pytest.raises(NotFound):
        store.forget("sarah", "not an id", T0)


def test_a_consolidation_batch_can_supersede_a_fact(store, embedder):
    from engram.models import EpisodicMemory

    turn = EpisodicMemory(
        id=new_id("episodic"), text="we moved", user_id="sarah", created_at=T0, timestamp=T0
    )
    (old,) = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    put(store, embedder, "sarah", turn)
    new = fact("sarah", "Sarah lives in Leith", supersedes=old.id)
    at = T0 + timedelta(days=1)
    write = ConsolidationWrite(
        rows=[new],
        vectors=embedder.embed_documents([new.text]),
        supersede={new.id: Supersession(old.id, retract=False, at=at)},
        merges=[],
        feedback=[],
        episode_ids=[turn.id],
        at=at,
    )
    store.apply_consolidation("sarah", write)
    assert store.fetch("sarah", [old.id])[0].superseded_by == new.id
    assert store.waiting_episodes("sarah", 10) == []
    empty = ConsolidationWrite([], np.zeros((0, embedder.dim), np.float32), {}, [], [], [turn.id], at)
    with pytest.raises(Conflict):  # already consolidated: compare-and-set refuses the batch
        store.apply_consolidation("sarah", empty)


def test_a_consolidation_batch_is_checked_like_an_insert(store, embedder):
    """A batch with another tenant's row, or a supersession naming no row of the batch, is refused as
    bad input and writes nothing: its episodes still wait."""
    from engram.models import EpisodicMemory

    turn = EpisodicMemory(id=new_id("episodic"), text="hi", user_id="sarah", created_at=T0, timestamp=T0)
    put(store, embedder, "sarah", turn)
    (old,) = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    mine, theirs = fact("sarah", "Sarah likes coffee"), fact("bob", "Bob likes coffee")
    at = T0 + timedelta(days=1)
    bad_writes = [
        ([theirs], {}),
        ([mine], {new_id("semantic"): Supersession(old.id, retract=False, at=at)}),
    ]
    for rows, supersede in bad_writes:
        write = ConsolidationWrite(
            rows=rows,
            vectors=embedder.embed_documents([r.text for r in rows]),
            supersede=supersede,
            merges=[],
            feedback=[],
            episode_ids=[turn.id],
            at=at,
        )
        with pytest.raises(InvalidInput):
            store.apply_consolidation("sarah", write)
    assert [e.id for e in store.waiting_episodes("sarah", 10)] == [turn.id]
    assert store.fetch("sarah", [mine.id]) == [] and store.fetch("bob", [theirs.id]) == []


def test_the_empty_tenant_is_not_the_catalog(store, embedder):
    """'' is the catalog's owner value, not a tenant: every backend refuses it (SQLite, which has no
    row-level security behind its owner conditions, once let it forget and write catalog rows)."""
    from engram.models import CatalogItem

    item = CatalogItem(
        id=new_id("catalog"), user_id=None, title="Hub", text="The hub has Zigbee radios", created_at=T0
    )
    put(store, embedder, CATALOG, item)
    with pytest.raises(InvalidInput):
        store.forget("", item.id, T0)
    with pytest.raises(InvalidInput):
        put(
            store,
            embedder,
            "",
            CatalogItem(id=new_id("catalog"), user_id=None, title="x", text="y", created_at=T0),
        )
    with pytest.raises(InvalidInput):
        store.fetch("", [item.id])
    assert store.fetch(CATALOG, [item.id]) == [item]


def test_a_tenant_is_a_valid_user_id_on_every_backend(store, embedder):
    """Not only the facade checks user ids: OpenSearch's document-level security pastes the owner into
    its query as text, so a quote in a tenant id (`mallory","bob`) would widen the rule to bob."""
    (bobs,) = put(store, embedder, "bob", fact("bob", "Bob's safe code is 1234"))
    everything = SearchFilter(frozenset({"episodic", "semantic", "procedural", "catalog"}))
    for bad in ['mallory","bob', "bob*", " bob", "a" * 200]:
        with pytest.raises(InvalidInput):
            store.search_text(bad, "safe code", everything, 10)
        with pytest.raises(InvalidInput):
            store.fetch(bad, [bobs.id])
        with pytest.raises(InvalidInput):
            store.forget(bad, bobs.id, T0)
    assert store.fetch("bob", [bobs.id]) == [bobs]

"""Deleting a user (a data-rights request) on every backend: afterwards no table or index holds
anything of theirs, read as the store's owner with raw queries (tests/storage/leftovers.py), their keys
and sessions open nothing at once, and every other tenant and the catalog are untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.auth import ApiKeys
from engram.models import (
    CatalogItem,
    EpisodicMemory,
    ProceduralMemory,
    SemanticMemory,
    Step,
    new_id,
    search_text_of,
)
from engram.storage.base import CATALOG, Supersession, episode_marks
from tests.storage.leftovers import opensearch_leftovers, postgres_leftovers, sqlite_leftovers

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
GONE = "gdpr.subject@example"  # the user deleted: a needle no other row contains
MARK = "Zorblax"  # a word only in the deleted user's texts


def leftovers(store, request, needles: list[str]) -> dict[str, int]:
    kind = request.node.callspec.params["store"]
    if kind == "sqlite":
        return sqlite_leftovers(store.path, needles, GONE, words=[MARK])
    if kind == "postgres":
        admin_url, _ = request.getfixturevalue("pg_urls")
        return postgres_leftovers(admin_url, needles)
    from engram.storage.opensearch._layout import tenant_user

    node = request.getfixturevalue("opensearch_node")
    return opensearch_leftovers(node, store.names.prefix, needles, [tenant_user(GONE)])


def put(store, embedder, tenant, *rows, supersede=None):
    vectors = embedder.embed_documents([search_text_of(r) for r in rows])
    store.insert(tenant, list(rows), vectors, supersede, tokens=[b"\x01\x02" * 8] * len(rows))


def populate(store, embedder, user: str, word: str) -> dict[str, str]:
    """A user with every kind of row: turns (one quoting another), a fact superseded by another, a
    playbook, a forgotten turn (a tombstone), use counts, a consolidated turn, token vectors."""
    turn = EpisodicMemory(
        id=new_id("episodic"), text=f"my {word} hub", user_id=user, created_at=T0, timestamp=T0
    )
    reply = EpisodicMemory(
        id=new_id("episodic"),
        text=f"{word} still blinks",
        user_id=user,
        created_at=T0 + timedelta(seconds=1),
        timestamp=T0,
        context_id=turn.id,
        context=turn.text,
    )
    doomed = EpisodicMemory(
        id=new_id("episodic"), text=f"{word} secret", user_id=user, created_at=T0, timestamp=T0
    )
    old = SemanticMemory(id=new_id("semantic"), text=f"{user} owns a {word} v1", user_id=user, created_at=T0)
    new = SemanticMemory(id=new_id("semantic"), text=f"{user} owns a {word} v2", user_id=user, created_at=T0)
    playbook = ProceduralMemory(
        id=new_id("procedural"),
        text="",
        user_id=user,
        created_at=T0,
        name=f"Reset the {word}",
        trigger_text=f"{word} will not pair",
        steps=[Step(order=1, instruction=f"hold the {word} reset")],
    )
    put(store, embedder, user, turn, reply, doomed, old, playbook)
    put(store, embedder, user, new, supersede={new.id: Supersession(old.id, retract=False, at=T0)})
    store.forget(user, doomed.id, T0)
    store.record_use(user, {new.id: 2}, T0)
    store.apply_consolidation(user, episode_marks([turn.id], T0, embedder.dim))
    return {"fact": new.id, "turn": reply.id}


def test_delete_user_leaves_nothing_of_theirs_and_their_keys_stop_at_once(store, embedder, request):
    mine = populate(store, embedder, GONE, MARK)
    theirs = populate(store, embedder, "bob", "Quokka")
    catalog = CatalogItem(id=new_id("catalog"), text="Hubs blink when pairing", user_id=None, created_at=T0)
    put(store, embedder, CATALOG, catalog)
    keys = ApiKeys(store)
    key, record = keys.create(GONE, "laptop")
    read_key, _ = keys.create(GONE, "dashboard", scope="read", expires_in=timedelta(days=30))
    bob_key, _ = keys.create("bob")
    session = keys.open_session(keys.authenticate(key), 3600)
    assert keys.resolve_session(session) is not None
    needles = [GONE, MARK, mine["fact"], mine["turn"], record.id]
    before = leftovers(store, request, needles)  # the raw check sees them while they are there
    assert any(MARK in k for k in before) and any(GONE in k for k in before), before

    counts = store.delete_user(GONE)

    assert counts["memories"] == 5 and counts["tombstones"] == 1 and counts["keys"] == 2
    assert counts["sessions"] == 1
    # Their keys and sessions open nothing, at once; bob's still does.
    assert keys.resolve(key) is None and keys.resolve(read_key) is None
    assert keys.resolve_session(session) is None and store.get_key(record.id) is None
    assert keys.resolve(bob_key) is not None
    # Nothing of theirs anywhere, read as the store's owner.
    assert leftovers(store, request, needles) == {}
    # Nobody else lost anything; the tenant list no longer names them.
    assert GONE not in store.tenants() and "bob" in store.tenants()
    assert [m.id for m in store.fetch("bob", [theirs["fact"], theirs["turn"], catalog.id])] == [
        theirs["fact"],
        theirs["turn"],
        catalog.id,
    ]
    assert len(store.tombstones("bob")) == 1
    # Idempotent: a second deletion finds nothing; the user id may be used again afresh.
    assert store.delete_user(GONE) == {}
    put(
        store,
        embedder,
        GONE,
        SemanticMemory(id=new_id("semantic"), text="fresh", user_id=GONE, created_at=T0),
    )
    assert [m.text for m in store.list_memories(GONE, "semantic")] == ["fresh"]

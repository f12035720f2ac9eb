"""One suite every Store backend must pass (parametrized by the ``store`` fixture)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from engram.errors import Conflict, InvalidInput, ModelError, NotFound
from engram.models import (
    CatalogItem,
    EpisodicMemory,
    ProceduralMemory,
    SemanticMemory,
    Step,
    new_id,
    search_text_of,
)
from engram.storage.base import CATALOG, SearchFilter, Supersession

ALL = SearchFilter(frozenset({"episodic", "semantic", "procedural", "catalog"}))
ALL_WITH_OLD = SearchFilter(ALL.memory_types, include_superseded=True)
T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def episode(user, text, at=T0):
    return EpisodicMemory(
        id=new_id("episodic"), text=text, user_id=user, created_at=at, timestamp=at, metadata={"n": 1}
    )


def fact(user, text, **kw):
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0, **kw)


def put(store, embedder, tenant, *rows, supersede=None):
    vectors = embedder.embed_documents([search_text_of(r) for r in rows])
    store.insert(tenant, list(rows), vectors, supersede)
    return rows[0] if len(rows) == 1 else rows


def test_model_is_recorded_and_a_different_one_refused(store, embedder):
    store.ensure_model(embedder.name, embedder.dim)  # same model: fine, idempotent
    with pytest.raises(ModelError, match="was built with embedding model"):
        store.ensure_model("some-other-model", embedder.dim)
    with pytest.raises(ModelError):
        store.ensure_model(embedder.name, 768)
    # The late-interaction model is recorded on its own key, and checked the same way.
    store.ensure_model("colbert-a", 384, kind="token")
    store.ensure_model("colbert-a", 384, kind="token")
    with pytest.raises(ModelError, match="token model 'colbert-a'"):
        store.ensure_model("colbert-b", 384, kind="token")
    store.ensure_model(embedder.name, embedder.dim)  # the embedding record is untouched


def test_every_type_round_trips_with_all_fields(store, embedder):
    ep = episode("sarah", "I got a new hub", at=T0 - timedelta(days=3))
    ep = ep.model_copy(update={"session_id": "s-1", "metadata": {"channel": "web", "nested": {"a": [1, 2]}}})
    fa = fact(
        "sarah",
        "Sarah owns a Lumio Hub v2",
        fact_type="identity",
        confidence=0.8,
        supporting_episode_ids=[ep.id],
        valid_from=T0,
        metadata={"src": "test"},
    )
    pb = ProceduralMemory(
        id=new_id("procedural"),
        text="",
        user_id="sarah",
        created_at=T0,
        name="Pair a sensor",
        trigger_text="sensor will not pair",
        description="reset then pair",
        steps=[Step(order=1, instruction="hold reset", tool="ask_user"), Step(order=2, instruction="pair")],
        success_count=2,
        failure_count=1,
    )
    cat = CatalogItem(
        id=new_id("catalog"), text="Hub v2 speaks Zigbee", title="Hub v2", user_id=None, created_at=T0
    )
    put(store, embedder, "sarah", ep, fa, pb)
    put(store, embedder, CATALOG, cat)
    got = store.fetch("sarah", [cat.id, pb.id, fa.id, ep.id])
    assert got == [cat, pb, fa, ep]  # order as asked, every field identical


def test_get_is_scoped_to_the_tenant(store, embedder):
    mine = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    theirs = put(store, embedder, "bob", fact("bob", "Bob likes coffee"))
    cat = put(
        store,
        embedder,
        CATALOG,
        CatalogItem(id=new_id("catalog"), text="Tea is a drink", user_id=None, created_at=T0),
    )
    assert [m.id for m in store.fetch("sarah", [mine.id, theirs.id, cat.id])] == [mine.id, cat.id]
    assert [m.id for m in store.fetch("sarah", [mine.id, cat.id], include_catalog=False)] == [mine.id]
    assert store.fetch(CATALOG, [mine.id, theirs.id, cat.id]) == [cat]
    assert store.fetch("sarah", ["not-an-id", "' OR 1=1 --", ""]) == []


def test_insert_refuses_rows_of_another_owner(store, embedder):
    with pytest.raises(InvalidInput):
        put(store, embedder, "sarah", fact("bob", "Bob likes coffee"))
    assert store.list_memories("bob", "semantic") == []


def test_text_search_matches_exact_tokens_within_scope(store, embedder):
    a = put(
        store,
        embedder,
        "marco",
        episode("marco", "deploy failed with ERR_SSL_PROTOCOL 0x1408F10B on staging"),
    )
    b = put(store, embedder, "marco", fact("marco", "prod runs postgres v15.3 with pgvector 0.5.1"))
    put(store, embedder, "sarah", episode("sarah", "my error was 0x1408F10B too and I run v15.3"))
    assert [h.id for h in store.search_text("marco", "what was 0x1408F10B about?", ALL, 10)] == [a.id]
    assert store.search_text("marco", "postgres v15.3", ALL, 10)[0].id == b.id
    only_facts = SearchFilter(frozenset({"semantic"}))
    assert [h.id for h in store.search_text("marco", "0x1408F10B v15.3", only_facts, 10)] == [b.id]
    hits = store.search_text("marco", "0x1408F10B", ALL, 10)
    assert all(h.score > 0 for h in hits)


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "AND",
        "OR NOT",
        "NEAR(a b)",
        "a*",
        "-x",
        "body:x",
        "owner : ocatalog",
        "'; DROP TABLE memories; --",
        "(((",
    ],
)
def test_text_search_survives_hostile_queries(store, embedder, query):
    mine = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    put(store, embedder, "bob", fact("bob", "Bob likes tea AND coffee"))
    hits = store.search_text("sarah", query, ALL, 10)  # no error, whatever the query syntax
    assert {h.id for h in hits} <= {mine.id}  # and never another tenant's row
    assert [h.id for h in store.search_text("sarah", "tea", ALL, 10)] == [mine.id]  # nothing dropped
    assert len(store.list_memories("sarah", "semantic")) == 1


def test_vector_search_is_exact_and_scoped(store, embedder):
    texts = [
        f"note {i}: {w}"
        for i, w in enumerate(
            ["tea", "coffee", "dogs", "cats", "zigbee", "thread", "bristol", "edinburgh"] * 3
        )
    ]
    rows = put(store, embedder, "sarah", *[episode("sarah", t) for t in texts])
    put(store, embedder, "bob", *[episode("bob", t) for t in texts])
    q = embedder.embed_query("which hot drinks do I like")
    hits = store.search_vector("sarah", q, ALL, 5)
    vectors = embedder.embed_documents(texts)
    expected = np.argsort(-(vectors @ q))[:5]
    assert [h.id for h in hits] == [rows[i].id for i in expected]
    assert np.allclose([h.score for h in hits], (vectors @ q)[expected], atol=1e-5)
    assert {
        m.user_id for m in store.fetch("sarah", [h.id for h in store.search_vector("sarah", q, ALL, 100)])
    } == {"sarah"}


def test_supersession_is_atomic_and_hides_the_old_row(store, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    new = fact("sarah", "Sarah lives in Edinburgh", supersedes=old.id, contradiction="harsh")
    at = T0 + timedelta(days=1)
    put(store, embedder, "sarah", new, supersede={new.id: Supersession(old.id, retract=True, at=at)})
    (old_now,) = store.fetch("sarah", [old.id])
    assert (old_now.superseded_by, old_now.superseded_at, old_now.retracted) == (new.id, at, True)
    live = SearchFilter(frozenset({"semantic"}))
    assert [h.id for h in store.search_text("sarah", "Sarah lives", live, 10)] == [new.id]
    assert [h.id for h in store.search_vector("sarah", embedder.embed_query("where"), live, 10)] == [new.id]
    history = SearchFilter(frozenset({"semantic"}), include_superseded=True)
    assert {h.id for h in store.search_text("sarah", "Sarah lives", history, 10)} == {old.id, new.id}


def test_failed_supersession_writes_nothing(store, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    first = fact("sarah", "Sarah lives in Leeds", supersedes=old.id)
    put(store, embedder, "sarah", first, supersede={first.id: Supersession(old.id, retract=False, at=T0)})
    bobs = put(store, embedder, "bob", fact("bob", "Bob lives in York"))
    ep = put(store, embedder, "sarah", episode("sarah", "hello"))
    cases = [
        (old.id, Conflict),  # already superseded
        (bobs.id, NotFound),  # another tenant's row: indistinguishable from a missing one
        (new_id("semantic"), NotFound),
        (ep.id, InvalidInput),  # a fact cannot supersede an episode
    ]
    for target, error in cases:
        row = fact("sarah", f"Sarah lives in {target}", supersedes=target)
        with pytest.raises(error):
            put(store, embedder, "sarah", row, supersede={row.id: Supersession(target, retract=False, at=T0)})
        assert store.fetch("sarah", [row.id]) == []
    assert store.fetch("bob", [bobs.id])[0].superseded_by is None
    assert len(store.list_memories("sarah", "semantic", include_superseded=True)) == 2


def test_record_use_increments_atomically_under_threads(store, embedder):
    f = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    other = put(store, embedder, "bob", fact("bob", "Bob likes tea"))
    seen: list[int] = []

    def bump():
        for _ in range(25):
            counts = store.record_use("sarah", {f.id: 1, other.id: 1}, T0)
            assert set(counts) == {f.id}  # bob's row is neither touched nor reported
            seen.append(counts[f.id])

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(1, 101))  # each call saw its own increment's result
    (row,) = store.fetch("sarah", [f.id])
    assert (row.use_count, row.last_used_at) == (100, T0)
    assert store.fetch("bob", [other.id])[0].use_count == 0  # not sarah's: untouched
    # Queued uses arrive merged (n at once) and late: last_used_at never moves back.
    assert store.record_use("sarah", {f.id: 3}, T0 - timedelta(days=1), max_wait_s=1.0) == {f.id: 103}
    assert store.fetch("sarah", [f.id])[0].last_used_at == T0


def test_forget_removes_everywhere_and_leaves_a_tombstone(store, embedder):
    f = put(store, embedder, "sarah", fact("sarah", "Sarah's PIN hint is the dog's name"))
    with pytest.raises(NotFound):
        store.forget("bob", f.id, T0)
    stone = store.forget("sarah", f.id, T0)
    assert (stone.id, stone.user_id, stone.memory_type, stone.forgotten_at) == (f.id, "sarah", "semantic", T0)
    assert not hasattr(stone, "text")
    assert store.fetch("sarah", [f.id]) == []
    assert store.search_text("sarah", "PIN hint dog", ALL, 10) == []
    assert store.search_vector("sarah", embedder.embed_query("PIN"), ALL, 10) == []
    with pytest.raises(NotFound):
        store.forget("sarah", f.id, T0)


def test_an_episode_is_found_by_the_words_of_its_context(store, embedder):
    question = episode("sarah", "Do you still play the drums?")
    reply = episode("sarah", "Yeah, for a month now!").model_copy(
        update={"context": question.text, "context_id": question.id}
    )
    put(store, embedder, "sarah", question, reply)
    found = [h.id for h in store.search_text("sarah", "drums", ALL, 10)]
    assert set(found) == {question.id, reply.id}
    assert store.fetch("sarah", [reply.id])[0].text == "Yeah, for a month now!"  # stored text unchanged
    assert store.search_text("bob", "drums", ALL, 10) == []


def test_forgetting_a_turn_removes_its_words_from_the_turns_quoting_it(store, embedder):
    secret = episode("sarah", "My locker code is marmalade")
    reply = episode("sarah", "Got it, noted").model_copy(
        update={"context": secret.text, "context_id": secret.id}
    )
    other = episode("sarah", "Thanks").model_copy(update={"context": "assistant said marmalade"})
    put(store, embedder, "sarah", secret, reply, other)
    store.forget("sarah", secret.id, T0)
    assert [h.id for h in store.search_text("sarah", "marmalade", ALL, 10)] == [other.id]
    (kept,) = store.fetch("sarah", [reply.id])
    assert (kept.text, kept.context, kept.context_id) == ("Got it, noted", None, None)


def test_token_vectors_are_stored_scoped_and_forgotten(store, embedder):
    a, b = episode("sarah", "first"), episode("sarah", "second")
    c = episode("bob", "bob's")
    vectors = embedder.embed_documents(["first", "second"])
    store.insert("sarah", [a, b], vectors, None, [b"\x01" * 392, b"\x02" * 784])
    store.insert("bob", [c], embedder.embed_documents(["bob's"]), None, [b"\x03" * 392])
    assert store.token_vectors("sarah", [a.id, b.id, c.id, "nonsense"]) == {
        a.id: b"\x01" * 392,
        b.id: b"\x02" * 784,
    }
    with pytest.raises(InvalidInput, match="every row"):
        store.insert("sarah", [episode("sarah", "x")], embedder.embed_documents(["x"]), None, [])
    store.forget("sarah", a.id, T0)
    assert store.token_vectors("sarah", [a.id, b.id]) == {b.id: b"\x02" * 784}


def test_rows_without_tokens_are_found_and_filled_per_tenant(store, embedder):
    a, b = episode("sarah", "first"), episode("sarah", "second")
    c = episode("bob", "bob's")
    store.insert("sarah", [a], embedder.embed_documents(["first"]), None, [b"\x01" * 392])
    store.insert("sarah", [b], embedder.embed_documents(["second"]))
    store.insert("bob", [c], embedder.embed_documents(["bob's"]))
    assert [m.id for m in store.rows_without_tokens("sarah", 10)] == [b.id]
    store.set_tokens("bob", {b.id: b"\x09" * 392})  # another tenant's id: ignored
    assert store.token_vectors("sarah", [b.id]) == {}
    store.set_tokens("sarah", {b.id: b"\x02" * 392})
    assert store.token_vectors("sarah", [b.id]) == {b.id: b"\x02" * 392}
    assert store.rows_without_tokens("sarah", 10) == []
    assert [m.id for m in store.rows_without_tokens("bob", 10)] == [c.id]


def test_a_context_whose_turn_was_forgotten_meanwhile_is_not_stored(store, embedder):
    """remember_turn reads the previous turn before its write transaction: if that turn is forgotten
    in between, the insert must not bring its words back."""
    gone = episode("sarah", "my passport number is XQ7781234")
    put(store, embedder, "sarah", gone)
    store.forget("sarah", gone.id, T0)
    reply = episode("sarah", "ok").model_copy(update={"context": gone.text, "context_id": gone.id})
    kept = episode("sarah", "and another").model_copy(update={"context": "ok", "context_id": reply.id})
    # said by the insert, so remember_turn answers the row as stored, not the words it was given
    assert store.insert("sarah", [reply], embedder.embed_documents(["ok"])) == {reply.id}
    assert store.insert("sarah", [kept], embedder.embed_documents(["and another"])) == set()
    assert store.search_text("sarah", "XQ7781234", ALL, 10) == []
    assert store.fetch("sarah", [reply.id])[0].context is None


def test_forgetting_a_link_of_a_supersession_chain_mends_it(store, embedder):
    live = SearchFilter(frozenset({"semantic"}))
    a = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    b = fact("sarah", "Sarah lives in Leith", supersedes=a.id)
    put(store, embedder, "sarah", b, supersede={b.id: Supersession(a.id, retract=True, at=T0)})
    c = fact("sarah", "Sarah lives in Edinburgh", supersedes=b.id)
    put(store, embedder, "sarah", c, supersede={c.id: Supersession(b.id, retract=False, at=T0)})
    store.forget("sarah", b.id, T0)  # the middle link: a now points at c, and stays hidden
    a_now, c_now = store.fetch("sarah", [a.id, c.id])
    assert (a_now.superseded_by, a_now.retracted, c_now.supersedes) == (c.id, True, a.id)
    assert [h.id for h in store.search_vector("sarah", embedder.embed_query("where"), live, 10)] == [c.id]
    store.forget("sarah", c.id, T0, revive_retracted=True)  # the head, asked to: a is live again
    (a_now,) = store.fetch("sarah", [a.id])
    assert (a_now.superseded_by, a_now.superseded_at, a_now.retracted) == (None, None, False)
    assert [h.id for h in store.search_vector("sarah", embedder.embed_query("where"), live, 10)] == [a.id]
    assert [h.id for h in store.search_text("sarah", "Bristol", live, 10)] == [a.id]
    d = fact("sarah", "Sarah lives in Glasgow", supersedes=a.id)
    put(store, embedder, "sarah", d, supersede={d.id: Supersession(a.id, retract=False, at=T0)})
    assert store.fetch("sarah", [a.id])[0].superseded_by == d.id
    store.forget("sarah", d.id, T0)  # a natural update forgotten: the value before it is current again
    assert store.fetch("sarah", [a.id])[0].superseded_by is None


def test_forgetting_a_harsh_correction_leaves_the_fact_retracted(store, embedder):
    """A harsh contradiction says the old fact was never true: forgetting the correction does not make
    it true again (issue 26, item 19). It stays retracted and out of live recall."""
    live = SearchFilter(frozenset({"semantic"}))
    a = put(store, embedder, "sarah", fact("sarah", "Sarah is allergic to penicillin"))
    b = fact("sarah", "Sarah was never allergic to anything", supersedes=a.id)
    at = T0 + timedelta(hours=1)
    put(store, embedder, "sarah", b, supersede={b.id: Supersession(a.id, retract=True, at=at)})
    store.forget("sarah", b.id, T0 + timedelta(hours=2))
    (a_now,) = store.fetch("sarah", [a.id])
    assert (a_now.superseded_by, a_now.superseded_at, a_now.retracted) == (b.id, at, True)
    assert store.search_text("sarah", "penicillin", live, 10) == []
    assert store.search_vector("sarah", embedder.embed_query("allergic"), live, 10) == []
    assert [h.id for h in store.search_text("sarah", "penicillin", ALL_WITH_OLD, 10)] == [a.id]
    assert store.list_memories("sarah", "semantic") == []
    # still superseded: a new fact is written, not chained onto it; the message names no forgotten row
    with pytest.raises(Conflict, match=f"{a.id} was retracted .* nothing current to supersede") as refused:
        c = fact("sarah", "Sarah is allergic to latex", supersedes=a.id)
        put(store, embedder, "sarah", c, supersede={c.id: Supersession(a.id, retract=False, at=T0)})
    assert b.id not in str(refused.value)


def test_list_pages_newest_first(store, embedder):
    rows = [episode("sarah", f"turn {i}", at=T0 + timedelta(minutes=i)) for i in range(7)]
    rows = [r.model_copy(update={"created_at": r.timestamp}) for r in rows]
    put(store, embedder, "sarah", *rows)
    first = store.list_memories("sarah", "episodic", limit=3)
    second = store.list_memories("sarah", "episodic", limit=3, offset=3)
    assert [r.text for r in first + second] == [f"turn {i}" for i in (6, 5, 4, 3, 2, 1)]
    assert store.list_memories("bob", "episodic") == []
    for bad in ({"limit": 0}, {"offset": -1}, {"offset": 2**63}, {"limit": 2**63}):  # 2^63: overflow
        with pytest.raises(InvalidInput):
            store.list_memories("sarah", "episodic", **bad)


def test_a_write_is_visible_to_another_connection_at_once(store, embedder, tmp_path):
    result = {}

    def reader():  # a new thread gets its own connection
        result["hits"] = store.search_text("sarah", "kumquat", ALL, 10)

    f = put(store, embedder, "sarah", fact("sarah", "Sarah grows a kumquat tree"))
    t = threading.Thread(target=reader)
    t.start()
    t.join()
    assert [h.id for h in result["hits"]] == [f.id]


# -- consolidation support -------------------------------------------------------------------------


def plan(store, embedder, episodes, *, rows=(), merges=(), feedback=(), supersede=None, skipped=False):
    from engram.storage.base import ConsolidationWrite

    return ConsolidationWrite(
        rows=list(rows),
        vectors=embedder.embed_documents([search_text_of(r) for r in rows])
        if rows
        else np.zeros((0, embedder.dim), np.float32),
        supersede=supersede or {},
        merges=list(merges),
        feedback=list(feedback),
        episode_ids=[e.id for e in episodes],
        at=T0 + timedelta(days=1),
        skipped=skipped,
    )


def test_waiting_episodes_come_oldest_first_until_consolidated(store, embedder):
    rows = [episode("sarah", f"turn {i}", at=T0 + timedelta(seconds=i)) for i in range(5)]
    rows = [r.model_copy(update={"created_at": r.timestamp}) for r in rows]
    put(store, embedder, "sarah", *rows[1:])
    put(store, embedder, "bob", episode("bob", "bob's turn"))
    assert [e.text for e in store.waiting_episodes("sarah", 3)] == ["turn 1", "turn 2", "turn 3"]
    store.apply_consolidation("sarah", plan(store, embedder, rows[1:3]))
    # Turn 0 was stamped first but committed last (issue 12.3): it still waits, it is not behind a line.
    put(store, embedder, "sarah", rows[0])
    assert [e.text for e in store.waiting_episodes("sarah", 10)] == ["turn 0", "turn 3", "turn 4"]
    store.apply_consolidation("sarah", plan(store, embedder, [rows[0]], skipped=True))  # set aside
    assert [e.text for e in store.waiting_episodes("sarah", 10)] == ["turn 3", "turn 4"]
    assert [e.text for e in store.waiting_episodes("bob", 10)] == ["bob's turn"]
    assert store.tenants() == ["bob", "sarah"]


def test_apply_consolidation_is_atomic_and_compare_and_set(store, embedder):
    from engram.storage.base import FactMerge, PlaybookFeedback

    eps = put(
        store, embedder, "sarah", episode("sarah", "the reset worked"), episode("sarah", "I live in Leith")
    )
    old_fact = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))
    pb = ProceduralMemory(
        id=new_id("procedural"),
        text="",
        user_id="sarah",
        created_at=T0,
        name="Reset a sensor",
        steps=[Step(order=1, instruction="hold reset")],
    )
    put(store, embedder, "sarah", pb)
    new_fact = fact("sarah", "Sarah's sensor reset worked", supporting_episode_ids=[eps[0].id])
    write = plan(
        store,
        embedder,
        eps,
        rows=[new_fact],
        merges=[FactMerge(old_fact.id, (eps[1].id,))],
        feedback=[PlaybookFeedback(pb.id, success=True)],
    )
    store.apply_consolidation("sarah", write)
    assert store.waiting_episodes("sarah", 10) == []
    merged = store.fetch("sarah", [old_fact.id])[0]
    assert merged.supporting_episode_ids == [eps[1].id] and merged.use_count == 1
    got_pb = store.fetch("sarah", [pb.id])[0]
    assert got_pb.success_count == 1 and got_pb.last_success_at == write.at
    assert store.fetch("sarah", [new_fact.id])[0].text == new_fact.text
    # a second run that read the same episodes is refused whole
    again = fact("sarah", "a duplicate from a stale run")
    with pytest.raises(Conflict):
        store.apply_consolidation("sarah", plan(store, embedder, eps, rows=[again]))
    assert store.fetch("sarah", [again.id]) == []
    # failure feedback refines the steps and bumps the version
    later = put(store, embedder, "sarah", episode("sarah", "the reset failed this time"))
    refine = plan(
        store,
        embedder,
        [later],
        feedback=[
            PlaybookFeedback(pb.id, success=False, refined_steps=(Step(order=1, instruction="hold 20 s"),))
        ],
    )
    store.apply_consolidation("sarah", refine)
    got_pb = store.fetch("sarah", [pb.id])[0]
    assert (got_pb.failure_count, got_pb.version, got_pb.refined_steps[0].instruction) == (1, 2, "hold 20 s")


def test_apply_consolidation_cannot_touch_another_tenant(store, embedder):
    from engram.storage.base import FactMerge, PlaybookFeedback

    eps = put(store, embedder, "sarah", episode("sarah", "hello"))
    bobs = put(store, embedder, "bob", fact("bob", "Bob likes tea"))
    for bad in (
        {"merges": [FactMerge(bobs.id, (eps.id,))]},
        {"feedback": [PlaybookFeedback(bobs.id, success=True)]},
    ):
        with pytest.raises(NotFound):
            store.apply_consolidation("sarah", plan(store, embedder, [eps], **bad))
    assert [e.id for e in store.waiting_episodes("sarah", 10)] == [eps.id]
    assert store.fetch("bob", [bobs.id])[0].use_count == 0


def test_text_scores_do_not_depend_on_other_tenants_rows(store, embedder):
    """A hit's bm25_score is shown to its tenant (explain): if corpus statistics counted other tenants'
    rows, comparing the scores of two own rows that differ in one word would tell whether other tenants
    use that word (issue 26, item 17). Each owner's rows are their own corpus on every backend."""
    put(
        store,
        embedder,
        "sarah",
        episode("sarah", "the zigbee sensor in the hall went offline again"),
        episode("sarah", "firmware update for the thermostat failed twice"),
        episode("sarah", "zigbee pairing needs the hub close by"),
        fact("sarah", "Sarah's hub runs firmware v15.3"),
        fact("sarah", "Sarah owns a garden shed"),
    )
    item = CatalogItem(id=new_id("catalog"), text="Zigbee sensors pair in 30 s", user_id=None, created_at=T0)
    put(store, embedder, CATALOG, item)
    queries = ["zigbee sensor firmware", "v15.3 thermostat", "garden"]

    def scores():
        return {q: [(h.id, h.score) for h in store.search_text("sarah", q, ALL, 50)] for q in queries}

    before = scores()
    assert all(before.values()) and {i for i, _ in before["zigbee sensor firmware"]} >= {item.id}
    # Another tenant writes rows with the query's words and rows without them (row counts, lengths).
    bob = [episode("bob", f"zigbee sensor {i} firmware v15.3 thermostat garden") for i in range(12)]
    bob += [episode("bob", f"an unrelated note number {i} " + "about nothing much " * 8) for i in range(12)]
    put(store, embedder, "bob", *bob)
    assert store.search_text("bob", "zigbee", ALL, 50)  # bob's rows are indexed and found
    assert scores() == before
    store.forget("bob", bob[0].id, T0)  # and a forget of another tenant's row changes nothing either
    assert scores() == before

"""Recall filters (engram.recall_filter) on every backend: session, event-time range and metadata
equality, applied inside both legs before their limit (parametrized by the ``store`` fixture)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from engram.errors import InvalidInput, NotFound
from engram.models import EpisodicMemory, ProceduralMemory, SemanticMemory, new_id, search_text_of
from engram.recall_filter import recall_filter
from engram.storage.base import CandidateSearch, SearchFilter, Supersession, playbook_outcome

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
TYPES = frozenset({"episodic", "semantic", "procedural", "catalog"})
QUERY = "the hub lost its wifi connection"


def turn(user, text, at, session, metadata):
    return EpisodicMemory(
        id=new_id("episodic"),
        text=text,
        user_id=user,
        created_at=T0,
        timestamp=at,
        session_id=session,
        metadata=metadata,
    )


def put(store, embedder, tenant, rows, supersede=None):
    store.insert(tenant, rows, embedder.embed_documents([search_text_of(r) for r in rows]), supersede)


@pytest.fixture
def filled(store, embedder):
    """12 turns that answer the query best (session "loud", day 0) and 6 weaker ones that match the
    filters below (session "quiet", days 1..6, metadata channel=web, n=1): without the filter inside the
    legs, a limit of 5 would be spent on the loud ones."""
    loud = [
        turn("sarah", f"The hub lost its wifi connection again ({i})", T0, "loud", {"channel": "app"})
        for i in range(12)
    ]
    quiet = [
        turn(
            "sarah",
            f"My hub dropped off the network on day {d}",
            T0 + timedelta(days=d),
            "quiet",
            {"channel": "web", "n": 1, "flag": True, "tags": ["web"]},
        )
        for d in range(1, 7)
    ]
    other = turn(
        "tom", "The hub lost its wifi connection", T0 + timedelta(days=2), "quiet", {"channel": "web"}
    )
    put(store, embedder, "sarah", loud + quiet)
    put(store, embedder, "tom", [other])
    return store, embedder, quiet


def legs(store, embedder, narrow, limit=5, tenant="sarah"):
    """Each leg's ids, through search_text/search_vector and, where offered, search_candidates."""
    where = SearchFilter(TYPES, narrow=narrow)
    vector = embedder.embed_query(QUERY)
    found = {
        "bm25": [h.id for h in store.search_text(tenant, QUERY, where, limit)],
        "dense": [h.id for h in store.search_vector(tenant, vector, where, limit)],
    }
    if isinstance(store, CandidateSearch):
        both = store.search_candidates(tenant, QUERY, vector, where, limit, tokens=False)
        assert [h.id for h in both.bm25] == found["bm25"]
        assert [h.id for h in both.dense] == found["dense"]
    return found


def test_a_session_filter_fills_the_limit_with_that_sessions_rows(filled):
    store, embedder, quiet = filled
    quiet_ids = {r.id for r in quiet}
    unfiltered = legs(store, embedder, recall_filter())
    assert not set(unfiltered["bm25"]) & quiet_ids and not set(unfiltered["dense"]) & quiet_ids
    for ids in legs(store, embedder, recall_filter(session_id="quiet")).values():
        assert len(ids) == 5 and set(ids) <= quiet_ids  # 5 of the 6, none of tom's
    assert legs(store, embedder, recall_filter(session_id="nowhere")) == {"bm25": [], "dense": []}


def test_a_time_range_is_inclusive_at_its_start_and_exclusive_at_its_end(filled):
    store, embedder, quiet = filled
    narrow = recall_filter(time_from=T0 + timedelta(days=2), time_to=T0 + timedelta(days=5))
    expected = {r.id for r in quiet if T0 + timedelta(days=2) <= r.timestamp < T0 + timedelta(days=5)}
    assert len(expected) == 3
    for ids in legs(store, embedder, narrow, limit=10).values():
        assert set(ids) == expected
    # an offset in the bound means the same instant
    later = recall_filter(time_from=(T0 + timedelta(days=6)).astimezone(timezone_plus_2()))
    for ids in legs(store, embedder, later, limit=10).values():
        assert ids == [quiet[-1].id]


def timezone_plus_2():
    return timezone(timedelta(hours=2))


def test_metadata_equality_all_pairs_by_value(filled):
    store, embedder, quiet = filled
    quiet_ids = {r.id for r in quiet}
    for metadata in ({"channel": "web"}, {"channel": "web", "n": 1}, {"n": 1.0}, {"flag": True}):
        for ids in legs(store, embedder, recall_filter(metadata=metadata)).values():
            assert len(ids) == 5 and set(ids) <= quiet_ids, metadata
    for metadata in ({"channel": "web", "n": 2}, {"n": True}, {"flag": 1}, {"tags": "web"}, {"n": "1"}):
        assert legs(store, embedder, recall_filter(metadata=metadata)) == {"bm25": [], "dense": []}, metadata


def test_a_facts_event_time_is_its_valid_from_and_filters_combine(store, embedder):
    old = SemanticMemory(
        id=new_id("semantic"),
        text="Sarah's hub lost its wifi connection in 1998",
        user_id="sarah",
        created_at=T0,
        valid_from=datetime(1998, 5, 1, tzinfo=UTC),
    )
    new = SemanticMemory(
        id=new_id("semantic"), text="Sarah's hub lost its wifi connection", user_id="sarah", created_at=T0
    )
    ep = turn("sarah", "the hub lost its wifi connection", T0, "s", {"k": "v"})
    put(store, embedder, "sarah", [old, new, ep])
    nineties = recall_filter(time_from=datetime(1990, 1, 1), time_to=datetime(2000, 1, 1))
    for ids in legs(store, embedder, nineties).values():
        assert ids == [old.id]
    for ids in legs(store, embedder, recall_filter(time_from=T0)).values():
        assert set(ids) == {new.id, ep.id}
    # a session filter keeps turns only; every condition must hold
    for ids in legs(
        store, embedder, recall_filter(session_id="s", metadata={"k": "v"}, time_to=T0 + timedelta(seconds=1))
    ).values():
        assert ids == [ep.id]
    assert legs(store, embedder, recall_filter(session_id="s", time_to=T0)) == {"bm25": [], "dense": []}
    empty = recall_filter(time_from=T0, time_to=T0)  # an empty range: nothing, not an error
    assert legs(store, embedder, empty) == {"bm25": [], "dense": []}
    # superseded rows stay out unless asked for, filtered or not
    newer = SemanticMemory(
        id=new_id("semantic"),
        text="Sarah's hub is back online",
        user_id="sarah",
        created_at=T0,
        valid_from=datetime(1999, 1, 1, tzinfo=UTC),
    )
    put(store, embedder, "sarah", [newer], {newer.id: Supersession(old.id, retract=False, at=T0)})
    assert legs(store, embedder, nineties)["dense"] == [newer.id]
    with_old = SearchFilter(TYPES, include_superseded=True, narrow=nineties)
    dense = store.search_vector("sarah", embedder.embed_query(QUERY), with_old, 5)
    assert [h.id for h in dense] == [old.id, newer.id]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session_id": ""}, "session_id"),
        ({"session_id": 5}, "session_id"),
        ({"time_from": "2025-01-01"}, "time_from"),
        ({"metadata": ["a"]}, "metadata"),
        ({"metadata": {"a": None}}, "metadata.a"),
        ({"metadata": {"a": [1]}}, "metadata.a"),
        ({"metadata": {"a": float("nan")}}, "finite"),
        ({"metadata": {"a": 2**60}}, "2\\*\\*53"),
        ({"metadata": {"": 1}}, "key"),
        ({"metadata": {f"k{i}": 1 for i in range(17)}}, "at most 16"),
    ],
)
def test_invalid_filters_are_refused(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        recall_filter(**kwargs)


def test_playbook_outcomes_count_atomically_and_only_for_the_owner(store, embedder):
    """``playbook_outcome`` (UserMemory.record_outcome's write): concurrent outcomes all count; another
    tenant's playbook, or a row that is not a playbook, is NotFound and changes nothing."""
    playbook = ProceduralMemory(
        id=new_id("procedural"), text="", user_id="sarah", created_at=T0, name="Reset"
    )
    fact = SemanticMemory(id=new_id("semantic"), text="Sarah owns a hub", user_id="sarah", created_at=T0)
    put(store, embedder, "sarah", [playbook, fact])

    def record(success: bool) -> None:
        store.apply_consolidation("sarah", playbook_outcome(playbook.id, success, T0))

    threads = [threading.Thread(target=record, args=(i % 4 != 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tenant, memory_id in (("bob", playbook.id), ("sarah", fact.id)):
        with pytest.raises(NotFound):
            store.apply_consolidation(tenant, playbook_outcome(memory_id, True, T0))
    (row,) = store.fetch("sarah", [playbook.id])
    assert (row.success_count, row.failure_count) == (3, 1) and row.last_success_at == T0

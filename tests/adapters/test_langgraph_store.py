"""EngramStore through LangGraph's own BaseStore surface (put/get/search/delete/list_namespaces, batch and
the async variants) and inside a compiled LangGraph graph, over a real Engram."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, InvalidNamespaceError, Item, ListNamespacesOp, PutOp, SearchOp

from engram import Client, Engram, InvalidInput, NotFound, PermissionDenied, SemanticMemory
from engram.adapters.langgraph_store import EngramStore

FACTS = ("users", "sarah", "facts")


@pytest.fixture
def store(eng: Engram) -> EngramStore:
    return EngramStore(eng)


def test_put_get_and_isolation(store: EngramStore, eng: Engram):
    store.put(FACTS, "home", {"text": "Sarah lives in Edinburgh", "source": "chat"})
    item = store.get(FACTS, "home")
    assert type(item) is Item
    assert (item.namespace, item.key, item.value) == (
        FACTS,
        "home",
        {"text": "Sarah lives in Edinburgh", "source": "chat"},
    )
    # it is an Engram fact of Sarah's, recallable as any other
    (row,) = eng.for_user("sarah").list("semantic")
    assert isinstance(row, SemanticMemory) and row.text == "Sarah lives in Edinburgh"
    assert store.get(FACTS, "nothing") is None
    assert store.get(("users", "bob", "facts"), "home") is None
    assert eng.for_user("bob").list("semantic") == []


def test_put_same_key_supersedes_and_get_returns_current(store: EngramStore, eng: Engram):
    store.put(FACTS, "home", {"text": "Sarah lives in Edinburgh"})
    first = store.get(FACTS, "home")
    store.put(FACTS, "home", {"text": "Sarah moved to Glasgow"})
    current = store.get(FACTS, "home")
    assert first is not None and current is not None
    assert current.value == {"text": "Sarah moved to Glasgow"}
    assert current.created_at == first.created_at < current.updated_at
    sarah = eng.for_user("sarah")
    (live,) = sarah.list("semantic")
    chain = sarah.history(live.id)
    assert [m.text for m in chain] == ["Sarah lives in Edinburgh", "Sarah moved to Glasgow"]
    assert isinstance(chain[0], SemanticMemory) and chain[0].superseded_by == live.id
    store.put(FACTS, "home", {"text": "Sarah moved to Glasgow"})  # the same value: no new version
    assert len(sarah.list("semantic", include_superseded=True)) == 2


def test_delete_forgets_the_whole_chain(store: EngramStore, eng: Engram):
    store.put(FACTS, "home", {"text": "Sarah lives in Edinburgh"})
    store.put(FACTS, "home", {"text": "Sarah moved to Glasgow"})
    ids = [m.id for m in eng.for_user("sarah").list("semantic", include_superseded=True)]
    store.delete(FACTS, "home")
    assert store.get(FACTS, "home") is None  # the older version did not come back to life
    for memory_id in ids:
        with pytest.raises(NotFound):
            eng.for_user("sarah").get(memory_id)
    store.delete(FACTS, "home")  # deleting what is gone is a no-op, as in LangGraph's stores


def test_search_is_recall_with_filters_and_paging(store: EngramStore):
    store.put(FACTS, "home", {"text": "Sarah lives in Edinburgh", "topic": "place", "rating": 3})
    store.put(FACTS, "pet", {"text": "Sarah has a border collie named Biscuit", "topic": "pet", "rating": 5})
    store.put(FACTS, "food", {"text": "Sarah is allergic to peanuts", "topic": "health", "rating": 4})
    store.put(("users", "sarah", "episodes"), "t1", {"text": "I took Biscuit to the vet today"})
    store.put(("users", "bob", "facts"), "pet", {"text": "Bob has a dog called Rex", "topic": "pet"})

    hits = store.search(("users", "sarah"), query="what is the name of her dog?")
    assert hits[0].key == "pet" and hits[0].score is not None
    assert {h.namespace for h in hits} == {FACTS, ("users", "sarah", "episodes")}  # all kinds, Sarah only
    assert all(h.value.get("text") != "Bob has a dog called Rex" for h in hits)
    only_facts = store.search(FACTS, query="what is the name of her dog?")
    assert {h.namespace for h in only_facts} == {FACTS}
    assert [h.key for h in store.search(FACTS, query="dog", filter={"topic": "pet"})] == ["pet"]
    rated = store.search(FACTS, query="Sarah", filter={"rating": {"$gte": 4}})
    assert {h.key for h in rated} == {"pet", "food"}
    assert {h.key for h in store.search(FACTS, filter={"topic": {"$ne": "pet"}})} == {"home", "food"}
    # no query: the live items, newest first, paged
    assert [h.key for h in store.search(FACTS)] == ["food", "pet", "home"]
    assert [h.key for h in store.search(FACTS, limit=1, offset=1)] == ["pet"]
    assert store.search(FACTS, limit=0) == []


def test_engram_rows_are_items_and_a_put_supersedes_them(store: EngramStore, eng: Engram):
    sarah = eng.for_user("sarah")
    fact = sarah.write("Sarah prefers window seats", fact_type="preference")
    turn = sarah.remember_turn("book me a flight to Lisbon")
    item = store.get(FACTS, fact.id)
    assert item is not None and item.value == {"text": "Sarah prefers window seats"}
    episode = store.get(("users", "sarah", "episodes"), turn.id)
    assert episode is not None and episode.value == {"text": "book me a flight to Lisbon"}
    store.put(FACTS, fact.id, {"text": "Sarah prefers aisle seats"})
    assert [m.text for m in sarah.list("semantic")] == ["Sarah prefers aisle seats"]
    assert sarah.get(fact.id).superseded_by is not None  # type: ignore[union-attr]


def test_playbooks_and_episodes(store: EngramStore, eng: Engram):
    playbooks = ("users", "sarah", "playbooks")
    store.put(
        playbooks,
        "refund",
        {"name": "refund a duplicate charge", "steps": ["find both charges", "refund one"]},
    )
    (playbook,) = eng.for_user("sarah").list("procedural")
    assert playbook.name == "refund a duplicate charge"  # type: ignore[union-attr]
    assert [s.instruction for s in playbook.steps] == ["find both charges", "refund one"]  # type: ignore[union-attr]
    episodes = ("users", "sarah", "episodes")
    store.put(episodes, "t1", {"text": "my order never arrived"})
    store.put(episodes, "t1", {"text": "my order arrived broken"})  # a turn is replaced, never edited
    assert [m.text for m in eng.for_user("sarah").list("episodic")] == ["my order arrived broken"]
    assert store.get(episodes, "t1").value == {"text": "my order arrived broken"}  # type: ignore[union-attr]
    # A replacement the store refuses (too long) leaves the turn it would have replaced in place.
    too_long = {"text": "x" * (eng.settings.max_text_chars + 1)}
    with pytest.raises(InvalidInput):
        store.put(episodes, "t1", too_long)
    assert store.get(episodes, "t1").value == {"text": "my order arrived broken"}  # type: ignore[union-attr]


def test_list_namespaces(store: EngramStore):
    store.put(("users", "sarah", "facts"), "a", {"text": "Sarah likes tea"})
    store.put(("users", "sarah", "episodes"), "b", {"text": "hello there"})
    store.put(("users", "bob", "facts"), "c", {"text": "Bob likes coffee"})
    assert store.list_namespaces() == [
        ("users", "bob", "facts"),
        ("users", "sarah", "episodes"),
        ("users", "sarah", "facts"),
    ]
    assert store.list_namespaces(prefix=("users", "sarah")) == [
        ("users", "sarah", "episodes"),
        ("users", "sarah", "facts"),
    ]
    assert store.list_namespaces(suffix=("facts",)) == [
        ("users", "bob", "facts"),
        ("users", "sarah", "facts"),
    ]
    assert store.list_namespaces(prefix=("users", "*", "episodes")) == [("users", "sarah", "episodes")]
    assert store.list_namespaces(max_depth=2) == [("users", "bob"), ("users", "sarah")]
    assert store.list_namespaces(limit=1, offset=1) == [("users", "sarah", "episodes")]
    assert store.list_namespaces(prefix=("nobody",)) == []


def test_bad_namespaces_and_ttl_change_nothing(store: EngramStore, eng: Engram):
    for bad in [("facts",), ("users", "sarah"), ("users", "sarah", "notes"), ("memories", "sarah", "facts")]:
        with pytest.raises(InvalidNamespaceError, match="a namespace is"):
            store.put(bad, "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):  # LangGraph's own checks: a dot, the reserved root
        store.put(("users", "sar.ah", "facts"), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("users", "sar.ah", "facts"), "k", {"text": "x"})])
    with pytest.raises(InvalidNamespaceError, match="one user"):
        store.search(("users",), query="anything")
    with pytest.raises(NotImplementedError):
        store.put(FACTS, "k", {"text": "x"}, ttl=5)
    with pytest.raises(InvalidInput, match="metadata"):  # a value JSON cannot hold
        store.put(FACTS, "k", {"text": "x", "when": datetime.now(UTC)})
    with pytest.raises(InvalidInput):  # a memory that shows nothing
        store.put(FACTS, "k", {"text": "  "})
    with pytest.raises(InvalidInput, match="steps"):
        store.put(("users", "sarah", "playbooks"), "k", {"name": "refund", "steps": "call the bank"})
    with pytest.raises(InvalidInput, match="operator"):
        store.search(FACTS, filter={"rating": {"$near": 3}})
    assert store.list_namespaces() == []


def test_batch_runs_in_order(store: EngramStore):
    results = store.batch(
        [
            PutOp(FACTS, "home", {"text": "Sarah lives in Edinburgh"}),
            GetOp(FACTS, "home"),
            SearchOp(FACTS, query="where does Sarah live"),
            ListNamespacesOp(),
            PutOp(FACTS, "home", None),
            GetOp(FACTS, "home"),
        ]
    )
    assert results[0] is None and results[4] is None and results[5] is None
    assert results[1].value == {"text": "Sarah lives in Edinburgh"}  # type: ignore[union-attr]
    assert [item.key for item in results[2]] == ["home"]  # type: ignore[union-attr]
    assert results[3] == [FACTS]


def test_async_variants(store: EngramStore):
    async def run() -> None:
        await asyncio.gather(
            store.aput(FACTS, "home", {"text": "Sarah lives in Edinburgh"}),
            store.aput(("users", "bob", "facts"), "home", {"text": "Bob lives in Oslo"}),
        )
        item = await store.aget(FACTS, "home")
        assert item is not None and item.value["text"] == "Sarah lives in Edinburgh"
        hits = await store.asearch(("users", "bob"), query="where does he live")
        assert [h.value["text"] for h in hits] == ["Bob lives in Oslo"]
        assert await store.alist_namespaces(prefix=("users", "bob")) == [("users", "bob", "facts")]
        await store.adelete(FACTS, "home")
        assert await store.aget(FACTS, "home") is None

    asyncio.run(run())


def test_over_the_rest_client_a_store_holds_one_user(eng: Engram, sarah_client: Client):
    store = EngramStore(sarah_client)
    store.put(FACTS, "home", {"text": "Sarah lives in Edinburgh"})
    store.put(FACTS, "home", {"text": "Sarah moved to Glasgow"})
    assert store.get(FACTS, "home").value == {"text": "Sarah moved to Glasgow"}  # type: ignore[union-attr]
    assert [h.key for h in store.search(("users", "sarah"), query="which city")] == ["home"]
    assert store.list_namespaces() == [FACTS]
    with pytest.raises(PermissionDenied):
        store.put(("users", "bob", "facts"), "home", {"text": "Bob lives in Oslo"})
    assert eng.for_user("bob").list("semantic") == []


class _Chat(TypedDict):
    user_id: str
    message: str
    answer: str


def test_a_langgraph_graph_keeps_its_memory_in_engram(store: EngramStore, eng: Engram):
    """The store as LangGraph hands it to a node (``runtime.store``): one run writes, the next recalls."""

    def remember(state: _Chat, runtime: Runtime[None]) -> dict[str, str]:
        assert runtime.store is not None
        namespace = ("users", state["user_id"], "facts")
        if state["message"].startswith("remember: "):
            runtime.store.put(namespace, "note", {"text": state["message"].removeprefix("remember: ")})
            return {"answer": "noted"}
        hits = runtime.store.search(namespace, query=state["message"], limit=1)
        return {"answer": hits[0].value["text"] if hits else "I don't know"}

    graph = StateGraph(_Chat).add_node("remember", remember)
    app = graph.add_edge(START, "remember").add_edge("remember", END).compile(store=store)
    app.invoke({"user_id": "sarah", "message": "remember: Sarah's dentist is Dr. Alvarez", "answer": ""})
    out = app.invoke({"user_id": "sarah", "message": "who is my dentist?", "answer": ""})
    assert out["answer"] == "Sarah's dentist is Dr. Alvarez"
    assert [m.text for m in eng.for_user("sarah").list("semantic")] == ["Sarah's dentist is Dr. Alvarez"]


def test_the_memory_text_comes_from_the_indexed_fields(eng: Engram):
    store = EngramStore(eng.for_user("sarah"), index_fields=["title", "body"])  # one user's handle
    store.put(FACTS, "trip", {"title": "Lisbon trip", "body": "flies out on the 12th", "seats": 2})
    store.put(FACTS, "seat", {"summary": "window seat", "seats": 1}, index=["summary"])
    store.put(FACTS, "bare", {"seats": 3})
    texts = {m.metadata["langgraph"]["key"]: m.text for m in eng.for_user("sarah").list("semantic")}
    assert texts == {
        "trip": "Lisbon trip\nflies out on the 12th",
        "seat": "window seat",
        "bare": '{"seats": 3}',
    }
    assert store.search(FACTS, query="when does she fly to Lisbon?")[0].key == "trip"
    with pytest.raises(PermissionDenied):
        store.get(("users", "bob", "facts"), "trip")


def test_two_puts_of_one_new_key_at_once_leave_one_live_version(store: EngramStore, eng: Engram):
    """LangGraph runs tool calls in parallel: two puts of a new key both found none and wrote two live
    facts, and a delete then brought one back (an outside review)."""

    async def run() -> None:
        await asyncio.gather(
            *(store.aput(FACTS, "home", {"text": f"Sarah lives in {city}"}) for city in ("Bristol", "Leeds"))
        )

    asyncio.run(run())
    sarah = eng.for_user("sarah")
    (live,) = sarah.list("semantic")
    assert len(sarah.history(live.id)) == 2 and store.get(FACTS, "home").value["text"] == live.text
    store.delete(FACTS, "home")
    assert store.get(FACTS, "home") is None and sarah.list("semantic") == []


def test_a_version_written_outside_the_store_keeps_the_items_key(store: EngramStore, eng: Engram):
    """Consolidation (or an agent) supersedes an item's fact with a row of its own: the key followed it
    (a get found nothing, and the next put started a second live chain)."""
    store.put(FACTS, "car", {"text": "Sarah drives a green Fiat", "source": "onboarding"})
    sarah = eng.for_user("sarah")
    (fiat,) = sarah.list("semantic")
    tesla = sarah.write("Sarah drives a blue Tesla", supersedes_id=fiat.id)  # no item entry of its own
    item = store.get(FACTS, "car")
    assert item is not None and item.value == {"text": "Sarah drives a blue Tesla", "source": "onboarding"}
    assert [h.key for h in store.search(FACTS, query="which car does Sarah drive?")][:1] == ["car"]
    store.put(FACTS, "car", {"text": "Sarah drives a red Volvo"})
    (live,) = sarah.list("semantic")
    assert [m.id for m in sarah.history(live.id)][:2] == [fiat.id, tesla.id]

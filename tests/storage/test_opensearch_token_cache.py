"""Token vectors on OpenSearch recall (``_token_cache``): the legs bring rows without them, and a recall
fetches only the token vectors the process does not hold at the version the legs saw. Bytes are
counted at the client's connections: a second recall of the same question must not fetch the ~22 KB a
row again, a rewritten row's new vectors must be used, a turn quoted from outside the legs comes by its
version, and a tenant never gets another's."""

from __future__ import annotations

import pytest

from engram.models import EpisodicMemory
from engram.retrieval.late_interaction import pack
from engram.storage.base import SearchFilter
from engram.storage.opensearch._token_cache import ENTRY_BYTES, TokenCache
from tests.conftest import make_store, opened_store
from tests.storage.test_opensearch_trips import T0, _fact, requests, turn

EVERYTHING = SearchFilter(frozenset({"episodic", "semantic", "procedural", "catalog"}))


def test_the_cache_gives_a_blob_only_at_its_version_and_keeps_to_its_budget():
    cache = TokenCache(max_bytes=2 * (ENTRY_BYTES + 10))
    cache.put([("a", ("i", 1, 1), b"a" * 10), ("b", ("i", 4, 1), b"b" * 10)])
    assert cache.get({"a": ("i", 1, 1), "b": ("i", 5, 1)}) == {"a": b"a" * 10}  # b was rewritten since
    cache.put([("c", ("i", 1, 1), b"c" * 10)])  # over budget: the least recently used (b) goes
    held = cache.get({"a": ("i", 1, 1), "b": ("i", 4, 1), "c": ("i", 1, 1)})
    assert held == {"a": b"a" * 10, "c": b"c" * 10}
    cache.put([("a", ("i", 2, 1), b"")])  # a row without token vectors is remembered as such
    assert cache.get({"a": ("i", 1, 1)}) == {} and cache.get({"a": ("j", 2, 1)}) == {}  # j: a migration
    assert cache.get({"a": ("i", 2, 1)}) == {"a": b""} and cache.size_bytes == 2 * ENTRY_BYTES + 10
    cache.put([("big", ("i", 1, 1), b"x" * 1000)])  # larger than the whole budget: not kept
    assert cache.get({"big": ("i", 1, 1)}) == {} and cache.get({"c": ("i", 1, 1)}) == {"c": b"c" * 10}
    off = TokenCache(max_bytes=0)
    off.put([("a", ("i", 1, 1), b"")])
    assert off.get({"a": ("i", 1, 1)}) == {} and off.size_bytes == 0


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)


def session(user: str, texts: list[str]) -> list[EpisodicMemory]:
    """Turns of one session, each replying to the one before (so recall needs their token vectors too)."""
    turns: list[EpisodicMemory] = []
    for text in texts:
        turns.append(turn(user, text, turns[-1] if turns else None))
    return turns


def insert(store, embedder, token_encoder, user, rows) -> dict[str, bytes]:
    texts = [r.text for r in rows]
    blobs = [pack(t) for t in token_encoder.encode_documents(texts)]
    store.insert(user, rows, embedder.embed_documents(texts), None, blobs)
    return {r.id: b for r, b in zip(rows, blobs, strict=True)}


def test_a_second_recall_fetches_no_token_vectors_and_a_rewritten_row_gets_its_new_ones(
    store, embedder, token_encoder
):
    texts = [f"the garage sensor {i} runs on a CR2032 coin cell, checked on day {i}" for i in range(30)]
    sarah = insert(store, embedder, token_encoder, "sarah", session("sarah", texts))
    bob = insert(store, embedder, token_encoder, "bob", session("bob", ["bob's garage sensor takes AAA"]))
    query = "which battery does the garage sensor take?"
    vector = embedder.embed_query(query)

    with requests(store) as cold:
        first = store.search_candidates("sarah", query, vector, EVERYTHING, 80, True)
    assert first.tokens == sarah  # every row's, the quoted turns' among them; never bob's
    with requests(store) as warm:
        again = store.search_candidates("sarah", query, vector, EVERYTHING, 80, True)
    assert again.tokens == sarah and [m.id for m in again.rows] == [m.id for m in first.rows]
    received = [sum(size for _, _, size in sent) for sent in (cold, warm)]
    assert received[1] < received[0] / 4, received  # 30 rows' ~10 KB of base64 each: not again

    rewritten = next(iter(sarah))
    other = pack(token_encoder.encode_documents(["a different text altogether"])[0])
    store.set_tokens("sarah", {rewritten: other})  # a new version of the document
    after = store.search_candidates("sarah", query, vector, EVERYTHING, 80, True)
    assert after.tokens == sarah | {rewritten: other}

    theirs = store.search_candidates("bob", query, vector, EVERYTHING, 80, True)
    assert theirs.tokens == bob  # the cache holds sarah's rows: bob's search never reaches them


def test_a_use_count_keeps_the_facts_vectors_cached_at_the_version_it_wrote(store, embedder, token_encoder):
    facts = [_fact("sarah", f"Sarah's garage sensor {i} takes a CR2032 coin cell") for i in range(8)]
    held = insert(store, embedder, token_encoder, "sarah", facts)
    query = "which battery does the garage sensor take?"
    vector = embedder.embed_query(query)
    assert store.search_candidates("sarah", query, vector, EVERYTHING, 80, True).tokens == held
    counts = store.record_use("sarah", dict.fromkeys(held, 1), T0)  # as recall does for the facts it returns
    assert counts == dict.fromkeys(held, 1)
    with requests(store) as sent:
        again = store.search_candidates("sarah", query, vector, EVERYTHING, 80, True)
    assert again.tokens == held and {m.id: m.use_count for m in again.rows} == dict.fromkeys(held, 1)
    assert len(sent) == 2, sent  # statistics + dense, text: the new versions found their vectors cached

    # a rewrite of the vectors (engram reindex) is not advanced: the next recall fetches the new ones
    other = pack(token_encoder.encode_documents(["a different text altogether"])[0])
    store.set_tokens("sarah", {facts[0].id: other})
    assert store.search_candidates("sarah", query, vector, EVERYTHING, 80, True).tokens[facts[0].id] == other


def test_a_quoted_turn_outside_the_legs_gets_its_vectors_and_never_another_tenants(
    store, embedder, token_encoder
):
    texts = ["my garage door pin is 4412"] + [
        f"garden centre opening hours {i} on saturdays" for i in range(20)
    ]
    turns = session("sarah", texts)
    sarah = insert(store, embedder, token_encoder, "sarah", turns)
    secret = turns[0]
    query = "what is the pin for the garage door?"
    vector = embedder.embed_query(query)
    assert store.search_candidates("sarah", query, vector, EVERYTHING, 80, True).tokens[secret.id]  # cached
    one = store.search_candidates("sarah", texts[5], embedder.embed_query(texts[5]), EVERYTHING, 1, True)
    (row,) = one.rows  # one row from each leg, the same one: the turn it quotes comes by its version
    assert row.context_id not in {m.id for m in one.rows}
    assert one.tokens == {row.id: sarah[row.id], row.context_id: sarah[row.context_id]}

    # bob's turn names sarah's cached turn as the one it quotes: bob may not read it, so he gets nothing
    (bob_turn,) = session("bob", ["what was that pin again"])
    bob_turn = bob_turn.model_copy(update={"context": "x", "context_id": secret.id})
    insert(store, embedder, token_encoder, "bob", [bob_turn])
    theirs = store.search_candidates("bob", query, vector, EVERYTHING, 80, True)
    assert secret.id not in theirs.tokens and bob_turn.id in theirs.tokens

    store.forget("sarah", secret.id, T0)  # its entry goes with it
    assert store._token_cache.get({secret.id: ("any", 0, 0)}) == {}
    held = store._token_cache.size_bytes
    store.delete_user("bob")
    assert held > 0 and store._token_cache.size_bytes == 0


def test_with_the_cache_off_a_recall_gets_the_same_vectors_in_one_request_more(
    request, tmp_path, embedder, token_encoder
):
    store = make_store("opensearch", tmp_path, request)
    try:
        store.ensure_model(embedder.name, embedder.dim)
        store._token_cache = TokenCache(0)
        turns = session("sarah", [f"the garage sensor {i} runs on a CR2032 cell" for i in range(5)])
        sarah = insert(store, embedder, token_encoder, "sarah", turns)
        query = "which battery does the garage sensor take?"
        vector = embedder.embed_query(query)
        with requests(store) as sizes:
            found = store.search_candidates("sarah", query, vector, EVERYTHING, 2, True)
        assert found.tokens == {m.id: sarah[m.id] for m in found.rows} | {
            m.context_id: sarah[m.context_id] for m in found.rows if m.context_id
        }
        assert len(sizes) == 3 and store._token_cache.size_bytes == 0  # statistics + dense, text, _mget
    finally:
        store.close()

"""Round trips of the OpenSearch store's writes, counted at the connection (every HTTP request the client
sends), so a change that adds one fails here: an appended turn is one request (no lease, no read), a
turn quoting a forgotten turn is stored without its words, and concurrent appends and forgets of one
session never leave a forgotten turn's words in another turn."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from engram import Engram
from engram.models import EpisodicMemory, SemanticMemory, new_id, search_text_of
from engram.storage.base import Supersession
from engram.storage.opensearch._statements import OpenSearchRows
from tests.conftest import opened_store

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)


@contextmanager
def requests(store) -> Iterator[list[tuple[str, str, int]]]:
    """(method, path, size of the answer's body) of every request the store's client sends inside the
    block."""
    sent: list[tuple[str, str, int]] = []
    conns = store._client.transport.connection_pool.connections
    reals = [c.perform_request for c in conns]
    for conn, real in zip(conns, reals, strict=True):

        def perform_request(method, url, *args, _real=real, **kwargs):
            status, headers, data = _real(method, url, *args, **kwargs)
            sent.append((method, url.split("?", 1)[0], len(data or "")))
            return status, headers, data

        conn.perform_request = perform_request
    try:
        yield sent
    finally:
        for conn, real in zip(conns, reals, strict=True):
            conn.perform_request = real


def turn(user, text, previous=None):
    return EpisodicMemory(
        id=new_id("episodic"),
        text=text,
        user_id=user,
        created_at=T0,
        timestamp=T0,
        session_id="s1",
        context=previous.text if previous else None,
        context_id=previous.id if previous else None,
    )


def put(store, embedder, user, row):
    store.insert(user, [row], embedder.embed_documents([search_text_of(row)]))
    return row


def test_an_appended_turn_is_one_request(store, embedder):
    first = put(store, embedder, "sarah", turn("sarah", "I booked the ferry to Oban"))  # the tenant's setup
    before = store._client.get(index=store.names.memories, id=first.id)["_seq_no"]
    with requests(store) as sent:
        second = put(store, embedder, "sarah", turn("sarah", "yes, the early one", first))
    assert [m for m, _, _ in sent] == ["POST"] and sent[0][1].endswith("/_bulk")
    # the check of the quoted turn changed nothing: a unit that read it (a consolidation marking it)
    # still writes it at the version it read, and a journal still tells whether that unit completed
    assert store._client.get(index=store.names.memories, id=first.id)["_seq_no"] == before
    [stored] = store.fetch("sarah", [second.id])
    assert stored.context_id == first.id
    # indexed with the turn it quotes: found by that turn's words
    assert {h.id for h in store.search_text("sarah", "Oban", _episodes(), 5)} == {first.id, second.id}


def test_a_supersession_still_reads_under_the_lease(store, embedder):
    old = put(store, embedder, "sarah", _fact("sarah", "Sarah lives in Leith"))
    new = _fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    with requests(store) as sent:
        store.insert(
            "sarah",
            [new],
            embedder.embed_documents([new.text]),
            {new.id: Supersession(old.id, retract=False, at=T0)},
        )
    # lease, read of the old row, new row, lease confirmed, old row marked, lease released
    assert len(sent) == 6
    assert store.fetch("sarah", [old.id])[0].superseded_by == new.id


def test_a_turn_quoting_a_forgotten_turn_is_stored_without_its_words(store, embedder):
    first = put(store, embedder, "sarah", turn("sarah", "my locker code is zanzibar"))
    store.forget("sarah", first.id, T0)
    with requests(store) as sent:
        second = put(store, embedder, "sarah", turn("sarah", "please keep it safe", first))
    assert len(sent) == 2  # the bulk, whose check found the turn gone; the row written again without it
    [stored] = store.fetch("sarah", [second.id])
    assert stored.context is None and stored.context_id is None
    assert store.search_text("sarah", "zanzibar", _episodes(), 5) == []


def test_a_turn_appended_while_its_quoted_turn_is_forgotten_loses_its_words(store, embedder, monkeypatch):
    """The worst interleaving, made to happen: the forget has looked for quoting turns (none yet), then
    the reply lands (its check passes: the turn is not deleted yet), then the forget deletes the turn.
    The forget's second look finds the reply and clears it."""
    quoted = put(store, embedder, "sarah", turn("sarah", "my locker code is zanzibar"))
    reply = turn("sarah", "please keep it safe", quoted)
    real = OpenSearchRows.quoting

    def quoting_then_reply(self, episode_id):
        found = real(self, episode_id)
        if reply.id not in {m.id for m in store.fetch("sarah", [reply.id])}:
            put(store, embedder, "sarah", reply)  # no lease: it runs while the forget holds it
        return found

    monkeypatch.setattr(OpenSearchRows, "quoting", quoting_then_reply)
    store.forget("sarah", quoted.id, T0)
    [stored] = store.fetch("sarah", [reply.id])
    assert stored.context is None and stored.context_id is None
    assert store.search_text("sarah", "zanzibar", _episodes(), 5) == []


def test_concurrent_appends_and_forgets_of_one_session_leave_no_forgotten_words(store, embedder):
    quoted = [put(store, embedder, "sarah", turn("sarah", f"secret word quokka{n}")) for n in range(8)]
    replies = [turn("sarah", f"reply {n}", q) for n, q in enumerate(quoted)]
    vectors = embedder.embed_documents([search_text_of(r) for r in replies])
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def append() -> None:
        start.wait()
        for reply, vector in zip(replies, vectors, strict=True):
            try:
                store.insert("sarah", [reply], [vector])
            except BaseException as exc:
                failures.append(exc)

    def forget() -> None:
        start.wait()
        for q in quoted:
            try:
                store.forget("sarah", q.id, T0)
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=append), threading.Thread(target=forget)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    stored = store.fetch("sarah", [r.id for r in replies])
    assert len(stored) == len(replies)
    assert all(m.context is None and m.context_id is None for m in stored)
    for n in range(len(quoted)):
        assert store.search_text("sarah", f"quokka{n}", _episodes(), 5) == []


def test_remember_turn_in_a_session_is_one_request(store, embedder):
    eng = Engram(store, embedder, None)
    you = eng.for_user("sarah")
    first = you.remember_turn("I booked the ferry to Oban", session_id="trip")
    with requests(store) as sent:
        second = you.remember_turn("yes, the early one", session_id="trip")
    assert len(sent) == 1
    assert second.context_id == first.id
    you.forget(second.id)
    third = you.remember_turn("and a cabin", session_id="trip")  # the session's latest is the first again
    assert third.context_id == first.id


def _episodes():
    from engram.storage.base import SearchFilter

    return SearchFilter(memory_types=frozenset({"episodic"}))


def _fact(user, text, **kw):
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0, **kw)

"""A process that dies in the middle of a multi-request write on OpenSearch: after each request of each
rule that takes several (supersession, forget, consolidation), the process "dies" (that request is
applied, its answer lost, and nothing is sent after it: no take-back, no lease release), and the store
is opened again once the lease has expired. The unit must be whole or absent: one live fact per
supersession chain, a tombstone exactly where a row was deleted, a consolidation's facts exactly when
its episodes are marked (and so never written twice), settled at the next open, by ``repair``, or by
the tenant's next write."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from engram.interfaces.cli import app
from engram.models import EpisodicMemory, SemanticMemory, new_id, search_text_of
from engram.storage.base import ConsolidationWrite, SearchFilter, Supersession
from engram.storage.opensearch import OpenSearchStore
from engram.storage.opensearch import _client as os_client
from engram.storage.opensearch._statements import OpenSearchRows
from tests.conftest import opened_store

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
TTL_MS = 400  # the leases of the dying writes expire this soon, so the reopened store may settle them


class Died(BaseException):
    """The process died: nothing catches this (``except Exception`` does not), like a kill."""


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)


@contextmanager
def dies_after(store: OpenSearchStore, n: int, only: str = "") -> Iterator[dict[str, int]]:
    """The store's process dies just after its ``n``-th request from now (applied, answer lost);
    ``only``: counting only the requests whose path has it."""
    sent = {"n": 0}
    conns = store._client.transport.connection_pool.connections
    reals = [c.perform_request for c in conns]
    for conn, real in zip(conns, reals, strict=True):

        def perform_request(method, url, *args, _real=real, **kwargs):
            if sent["n"] >= n:
                raise Died
            sent["n"] += only in url
            answer = _real(method, url, *args, **kwargs)
            if sent["n"] == n:
                raise Died
            return answer

        conn.perform_request = perform_request
    try:
        yield sent
    finally:
        for conn, real in zip(conns, reals, strict=True):
            conn.perform_request = real


def reopened(store: OpenSearchStore) -> OpenSearchStore:
    """A new process's store on the same indices (its open settles what dead writers left)."""
    return OpenSearchStore(f"opensearchs://{store.endpoint.host}:{store.endpoint.port}", store.options)


@pytest.fixture
def survivor(store):
    """Another process's store on the same indices, alive throughout: it runs ``repair``."""
    other = reopened(store)
    other.dying = store  # the store whose process dies (the tests' own attribute)
    yield other
    other.close()


def put(store, embedder, user, *rows):
    store.insert(user, list(rows), embedder.embed_documents([search_text_of(r) for r in rows]))
    return rows


def fact(user, text, **kw):
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0, **kw)


def each_crash_point(survivor, setup: Callable[[str], Any], run: Callable[[str, Any], None], check) -> int:
    """For a new user each time: ``setup``, then ``run`` the rule, the process dying after its 1st, 2nd,
    ... request, until it completes; then, once the dead writers' leases have expired,
    ``survivor.repair()``, and each rule must be whole or absent (``check(survivor, user, state)``).
    Returns how many requests the rule took."""
    store = survivor.dying
    died: list[tuple[str, Any]] = []
    for n in itertools.count(1):
        user = f"crash{n}"
        state = setup(user)
        with dies_after(store, n):
            try:
                run(user, state)
                break
            except Died:
                died.append((user, state))
    time.sleep(TTL_MS / 1000 + 0.1)
    settled = set(survivor.repair()["settled"])  # the deaths between the journal and the release
    assert settled and settled < {user for user, _ in died}
    for user, state in died:
        check(survivor, user, state)
    return len(died)


@pytest.fixture(autouse=True)
def short_leases(monkeypatch):
    monkeypatch.setattr(os_client, "LEASE_TTL_MS", TTL_MS)


def test_a_supersession_killed_anywhere_leaves_one_live_fact(store, survivor, embedder):
    def setup(user):
        old = put(store, embedder, user, fact(user, "Sarah lives in Leith"))[0]
        return old, fact(user, "Sarah lives in Porto", supersedes=old.id)

    def run(user, state):
        old, new = state
        supersede = {new.id: Supersession(old.id, retract=False, at=T0)}
        store.insert(user, [new], embedder.embed_documents([new.text]), supersede)

    def check(after, user, state):
        old, new = state
        live = after.list_memories(user, "semantic")
        assert len(live) == 1  # one live fact in the chain
        if live[0].id == old.id:
            assert after.fetch(user, [new.id]) == []
        else:
            assert live[0].id == new.id and after.fetch(user, [old.id])[0].superseded_by == new.id

    # lease, the old row read, journal, new row, (the lease confirmed again: TTL_MS is short here), old
    # row marked, lease released: each a crash point
    assert each_crash_point(survivor, setup, run, check) in (6, 7)


def test_a_forget_killed_anywhere_leaves_a_tombstone_exactly_where_a_row_went(store, survivor, embedder):
    def setup(user):
        quoted = _turn(user, "my locker code is zanzibar")
        put(store, embedder, user, quoted)
        reply = _turn(user, "keep it safe", quoted)
        put(store, embedder, user, reply)
        return quoted, reply

    def run(user, state):
        store.forget(user, state[0].id, T0)

    def check(after, user, state):
        quoted, reply = state
        gone = after.fetch(user, [quoted.id]) == []
        assert [t.id for t in after.tombstones(user)] == ([quoted.id] if gone else [])
        [stored] = after.fetch(user, [reply.id])
        if gone:  # completed: the reply's quote went in the same bulk as the row
            assert stored.context_id is None
        else:
            assert stored.context_id == quoted.id  # rolled back whole: the reply still quotes it

    # lease, row read, quotes searched, quoting row read, journal, tombstone, row deleted and quote
    # cleared, release; then the second look for quotes: lease, search, read, release
    print("forget requests", each_crash_point(survivor, setup, run, check))


def test_a_consolidation_killed_anywhere_is_applied_once(store, survivor, embedder):
    def setup(user):
        eps = put(store, embedder, user, _turn(user, "I moved to Leith"), _turn(user, "in May"))
        row = fact(user, "Sarah lives in Leith", supporting_episode_ids=[eps[0].id])
        return ConsolidationWrite(
            rows=[row],
            vectors=embedder.embed_documents([search_text_of(row)]),
            supersede={},
            merges=[],
            feedback=[],
            episode_ids=[e.id for e in eps],
            at=T0 + timedelta(days=1),
        )

    def run(user, write):
        store.apply_consolidation(user, write)

    def check(after, user, write):
        facts = after.list_memories(user, "semantic")
        waiting = after.waiting_episodes(user, 10)
        assert (len(facts), len(waiting)) in ((0, 2), (1, 0))  # whole or absent
        if waiting:  # the worker runs the batch again: one fact, not two
            again = fact(user, "Sarah lives in Leith", supporting_episode_ids=[waiting[0].id])
            after.apply_consolidation(user, ConsolidationWrite(**{**write.__dict__, "rows": [again]}))
        assert len(after.list_memories(user, "semantic")) == 1
        assert after.waiting_episodes(user, 10) == []

    # lease, episodes read, journal, fact, (lease confirmed again), episodes marked, release
    assert each_crash_point(survivor, setup, run, check) in (6, 7)


def test_the_next_open_settles_a_unit_left_by_a_dead_writer(store, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))[0]
    new = fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    with dies_after(store, 1, "/_bulk"), pytest.raises(Died):  # after the new row, before the old is marked
        supersede = {new.id: Supersession(old.id, retract=False, at=T0)}
        store.insert("sarah", [new], embedder.embed_documents([new.text]), supersede)
    time.sleep(TTL_MS / 1000 + 0.1)
    after = reopened(store)
    try:
        assert [m.id for m in after.list_memories("sarah", "semantic")] == [old.id]  # rolled back
    finally:
        after.close()


def test_the_tenants_next_write_settles_a_unit_left_by_a_dead_writer(store, survivor, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))[0]
    new = fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    with dies_after(store, 2, "/_bulk"), pytest.raises(Died):  # after the old one was marked
        supersede = {new.id: Supersession(old.id, retract=False, at=T0)}
        store.insert("sarah", [new], embedder.embed_documents([new.text]), supersede)
    time.sleep(TTL_MS / 1000 + 0.1)
    survivor.forget("sarah", new.id, T0)  # takes the expired lease over: the unit was complete
    assert [m.id for m in survivor.list_memories("sarah", "semantic")] == [old.id]  # revived


def test_engram_repair_settles_a_unit_left_by_a_dead_writer(store, embedder, tmp_path):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))[0]
    new = fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    with dies_after(store, 1, "/_bulk"), pytest.raises(Died):  # after the new row, before the old is marked
        supersede = {new.id: Supersession(old.id, retract=False, at=T0)}
        store.insert("sarah", [new], embedder.embed_documents([new.text]), supersede)
    assert {m.id for m in store.list_memories("sarah", "semantic")} == {old.id, new.id}  # two live
    time.sleep(TTL_MS / 1000 + 0.1)
    options = store.options
    env = {
        "ENGRAM_HOME": str(tmp_path),
        "ENGRAM_OS_USER": options.user,
        "ENGRAM_OS_PASSWORD": options.password,
        "ENGRAM_OS_CA_CERTS": options.ca_certs,
        "ENGRAM_OS_INDEX_PREFIX": options.index_prefix,
    }
    url = f"opensearchs://{store.endpoint.host}:{store.endpoint.port}"
    ran = CliRunner().invoke(app, ["repair", "--store", url, "--json"], env=env)
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout) == {"settled": ["sarah"], "quotes_cleared": 0, "held": 0}
    assert [m.id for m in store.list_memories("sarah", "semantic")] == [old.id]  # rolled back
    assert store.repair() == {"settled": [], "quotes_cleared": 0, "held": 0}


def test_repair_clears_a_forgotten_turns_words_from_a_reply_its_forget_missed(store, embedder, monkeypatch):
    """What a forget killed between its commit and its second look for quotes can leave: a reply
    appended in that instant, still quoting the forgotten turn (made here by hiding the reply from
    both looks)."""
    quoted = put(store, embedder, "sarah", _turn("sarah", "my locker code is zanzibar"))[0]
    reply = put(store, embedder, "sarah", _turn("sarah", "keep it safe", quoted))[0]
    real = OpenSearchRows.quoting
    monkeypatch.setattr(OpenSearchRows, "quoting", lambda self, episode_id: [])
    store.forget("sarah", quoted.id, T0)
    monkeypatch.setattr(OpenSearchRows, "quoting", real)
    assert store.fetch("sarah", [reply.id])[0].context_id == quoted.id  # left quoting it
    assert store.repair() == {"settled": [], "quotes_cleared": 1, "held": 0}
    [stored] = store.fetch("sarah", [reply.id])
    assert stored.context is None and stored.context_id is None
    episodes = SearchFilter(memory_types=frozenset({"episodic"}))
    assert store.search_text("sarah", "zanzibar", episodes, 5) == []
    assert [h.id for h in store.search_text("sarah", "safe", episodes, 5)] == [reply.id]
    assert store.repair()["quotes_cleared"] == 0


def _turn(user, text, quoted=None):
    return EpisodicMemory(
        id=new_id("episodic"),
        text=text,
        user_id=user,
        created_at=T0,
        timestamp=T0,
        context=quoted.text if quoted else None,
        context_id=quoted.id if quoted else None,
    )

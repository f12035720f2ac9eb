"""The OpenSearch store's write path when something fails midway: a unit of work is whole or nothing
where it can be, a failure after the commit never turns it into an error, and a retry completes what an
interrupted write left. Each failure is provoked here (a patched request, a lease that expires); the
SQL backends get all this from their transactions."""

from __future__ import annotations

import fnmatch
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from engram.errors import Conflict, ModelError, StorageError, StoreBusy
from engram.models import EpisodicMemory, SemanticMemory, Tombstone, new_id, search_text_of
from engram.storage.base import ConsolidationWrite, Supersession
from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore
from engram.storage.opensearch import _client as os_client
from engram.storage.opensearch import _store as os_store
from engram.storage.opensearch._layout import Names, tenant_role
from engram.storage.opensearch._meta import OpenSearchMeta
from engram.storage.opensearch._statements import OpenSearchRows
from tests.conftest import opened_store

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)


def fact(user, text, **kw):
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0, **kw)


def episode(user, text):
    return EpisodicMemory(id=new_id("episodic"), text=text, user_id=user, created_at=T0, timestamp=T0)


def put(store, embedder, tenant, *rows, supersede=None):
    store.insert(tenant, list(rows), embedder.embed_documents([search_text_of(r) for r in rows]), supersede)
    return rows[0] if len(rows) == 1 else rows


def fail_second_bulk(monkeypatch, error=None):
    """The second bulk of the next unit of work fails before it is sent; returns the undo."""
    real = OpenSearchRows._bulk
    calls = {"n": 0}

    def bulk(self, lines):
        calls["n"] += 1
        if calls["n"] == 2:
            raise error or StorageError("cannot reach OpenSearch: connection reset")
        return real(self, lines)

    monkeypatch.setattr(OpenSearchRows, "_bulk", bulk)
    return lambda: monkeypatch.setattr(OpenSearchRows, "_bulk", real)


def fail_lease_release(store, monkeypatch):
    from opensearchpy.exceptions import ConnectionError as OsConnectionError

    real = store._client.delete

    def delete(*args, **kwargs):
        if str(kwargs.get("id", "")).startswith("lock:"):
            raise OsConnectionError("N/A", "connection reset", None)
        return real(*args, **kwargs)

    monkeypatch.setattr(store._client, "delete", delete)
    return lambda: monkeypatch.setattr(store._client, "delete", real)


def a_502_after(store, nth_bulk):
    """The node applies the ``nth_bulk`` bulk request, then the proxy in front answers 502."""
    from opensearchpy.exceptions import TransportError

    conn = store._client.transport.connection_pool.connections[0]
    real = conn.perform_request
    seen = {"bulks": 0, "sent": []}

    def perform_request(method, url, *args, **kwargs):
        seen["sent"].append((method, url))
        answer = real(method, url, *args, **kwargs)
        if url.endswith("/_bulk"):
            seen["bulks"] += 1
            if seen["bulks"] == nth_bulk:
                raise TransportError(502, "Bad Gateway", {})
        return answer

    conn.perform_request = perform_request
    return seen, lambda: setattr(conn, "perform_request", real)


def stall_after_creates(monkeypatch, seconds):
    """The next units of work stall between their first bulk (the new documents) and their second."""
    real = OpenSearchRows._bulk

    def bulk(self, lines):
        failed = real(self, lines)
        if any("create" in line for line in lines):
            time.sleep(seconds)
        return failed

    monkeypatch.setattr(OpenSearchRows, "_bulk", bulk)


# -- W5: the lease's release ------------------------------------------------------------------------


def test_a_failed_lease_release_does_not_fail_a_committed_write(store, embedder, monkeypatch):
    restore = fail_lease_release(store, monkeypatch)
    row = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))  # no StorageError
    restore()
    assert [m.id for m in store.fetch("sarah", [row.id])] == [row.id]


def test_a_failed_lease_release_does_not_block_the_tenant(store, embedder, monkeypatch):
    f = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    restore = fail_lease_release(store, monkeypatch)
    assert store.record_use("sarah", {f.id: 1}, T0) == {f.id: 1}
    restore()
    # the lease left behind is this store's own: the next write takes it back, not waiting the TTL
    assert store.record_use("sarah", {f.id: 1}, T0, max_wait_s=2.0) == {f.id: 2}


# -- W3: no resend of a write -----------------------------------------------------------------------


def test_only_reads_are_sent_again():
    assert not os_client.is_write("GET", "/x/_doc/1")
    assert not os_client.is_write("POST", "/x/_search")
    assert not os_client.is_write("POST", "/_msearch")
    assert not os_client.is_write("POST", "/x/_mget?realtime=true")
    assert os_client.is_write("POST", "/_bulk")
    assert os_client.is_write("PUT", "/x/_create/1")
    assert os_client.is_write("DELETE", "/x/_doc/1")
    assert os_client.is_write("POST", "/x/_update/1")


def test_a_502_after_the_creates_landed_leaves_nothing(store, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))
    new = fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    _, restore = a_502_after(store, 1)
    try:
        with pytest.raises(StorageError):
            store.insert(
                "sarah",
                [new],
                embedder.embed_documents([search_text_of(new)]),
                {new.id: Supersession(old.id, retract=False, at=T0)},
            )
    finally:
        restore()
    assert {m.id for m in store.list_memories("sarah", "semantic")} == {old.id}
    assert store.fetch("sarah", [old.id])[0].superseded_by is None


def test_a_502_after_the_second_bulk_landed_is_a_success(store, embedder):
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))
    new = fact("sarah", "Sarah lives in Porto", supersedes=old.id)
    seen, restore = a_502_after(store, 2)
    try:
        store.insert(
            "sarah",
            [new],
            embedder.embed_documents([search_text_of(new)]),
            {new.id: Supersession(old.id, retract=False, at=T0)},
        )
    finally:
        restore()
    assert seen["bulks"] == 2  # sent once each: no resend
    assert {m.id for m in store.list_memories("sarah", "semantic")} == {new.id}
    assert store.fetch("sarah", [old.id])[0].superseded_by == new.id


# -- W6: the tenant list ----------------------------------------------------------------------------


def test_a_tenant_is_listed_before_its_rows_are_written(store, embedder, monkeypatch):
    real = OpenSearchMeta.note_tenant

    def note_fails(self, owner):
        raise StorageError("cannot reach OpenSearch: timeout")

    monkeypatch.setattr(OpenSearchMeta, "note_tenant", note_fails)
    row = fact("sarah", "Sarah likes tea")
    with pytest.raises(StorageError):
        put(store, embedder, "sarah", row)
    monkeypatch.setattr(OpenSearchMeta, "note_tenant", real)
    assert store.fetch("sarah", [row.id]) == []  # not written: no rows of a tenant missing from the list
    put(store, embedder, "sarah", row)
    assert store.tenants() == ["sarah"]


# -- W7: add_tombstones is all or nothing ------------------------------------------------------------


def test_add_tombstones_with_a_repeated_id_writes_nothing(store):
    one, two = (
        Tombstone(
            id=new_id("semantic"), user_id="sarah", memory_type="semantic", created_at=T0, forgotten_at=T0
        )
        for _ in range(2)
    )
    with pytest.raises(Conflict):
        store.add_tombstones("sarah", [one, two, one])
    assert store.tombstones("sarah") == []


# -- W8: two first starts with different models --------------------------------------------------------


def test_a_first_start_that_lost_the_race_for_the_model_record_is_refused(store, embedder, monkeypatch):
    real = OpenSearchMeta.read_meta
    reads = {"n": 0}

    def read_before_the_winner_wrote(self, keys):
        reads["n"] += 1
        return {} if reads["n"] == 1 else real(self, keys)

    monkeypatch.setattr(OpenSearchMeta, "read_meta", read_before_the_winner_wrote)
    with pytest.raises(ModelError):
        store.ensure_model("another-model", embedder.dim)


# -- W1 / W2: a commit interrupted between its two bulks -----------------------------------------------


def test_a_forget_whose_second_bulk_failed_leaves_nothing(store, embedder, monkeypatch):
    f = put(store, embedder, "sarah", fact("sarah", "Sarah's PIN hint is the dog's name"))
    restore = fail_second_bulk(monkeypatch)
    with pytest.raises(StorageError):
        store.forget("sarah", f.id, T0)
    restore()
    assert [m.id for m in store.fetch("sarah", [f.id])] == [f.id]
    assert store.tombstones("sarah") == []
    store.forget("sarah", f.id, T0)
    assert store.fetch("sarah", [f.id]) == []


def test_a_forget_cut_off_between_its_bulks_completes_on_retry(store, embedder, monkeypatch):
    """The process dies after the tombstone's bulk (nothing takes it back): forgetting again works."""
    f = put(store, embedder, "sarah", fact("sarah", "Sarah's PIN hint is the dog's name"))
    restore = fail_second_bulk(monkeypatch)
    monkeypatch.setattr(OpenSearchRows, "_take_back", lambda self, docs: None)
    monkeypatch.setattr(OpenSearchRows, "_landed", lambda self, changed: -1, raising=False)
    with pytest.raises(StorageError):
        store.forget("sarah", f.id, T0)
    restore()
    monkeypatch.undo()
    assert [s.id for s in store.tombstones("sarah")] == [f.id]  # the tombstone stayed, the row too
    assert [m.id for m in store.fetch("sarah", [f.id])] == [f.id]
    stone = store.forget("sarah", f.id, T0 + timedelta(seconds=1))
    assert stone.id == f.id
    assert store.fetch("sarah", [f.id]) == []
    assert [s.id for s in store.tombstones("sarah")] == [f.id]


def test_a_consolidation_whose_second_bulk_failed_is_not_applied_twice(store, embedder, monkeypatch):
    eps = put(store, embedder, "sarah", episode("sarah", "I moved to Leith"), episode("sarah", "in May"))

    def write(text):
        row = fact("sarah", text, supporting_episode_ids=[eps[0].id])
        return ConsolidationWrite(
            rows=[row],
            vectors=embedder.embed_documents([search_text_of(row)]),
            supersede={},
            merges=[],
            feedback=[],
            episode_ids=[e.id for e in eps],
            at=T0 + timedelta(days=1),
        )

    restore = fail_second_bulk(monkeypatch)
    with pytest.raises(StorageError):
        store.apply_consolidation("sarah", write("Sarah lives in Leith"))
    restore()
    assert len(store.waiting_episodes("sarah", 10)) == 2
    store.apply_consolidation("sarah", write("Sarah lives in Leith since May"))
    assert [f.text for f in store.list_memories("sarah", "semantic")] == ["Sarah lives in Leith since May"]


def test_an_item_refused_with_429_is_store_busy(store, embedder, monkeypatch):
    def busy(**kwargs):
        items = [
            {"create": {"_id": line["create"]["_id"], "status": 429, "error": {"type": "es_rejected"}}}
            for line in kwargs["body"]
            if "create" in line
        ]
        return {"errors": True, "items": items}

    monkeypatch.setattr(store._client, "bulk", busy)
    with pytest.raises(StoreBusy):
        put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))


# -- W4: a unit of work that outlives its lease ------------------------------------------------------


def test_a_holder_past_the_lease_ttl_gives_up_whole(store, embedder, monkeypatch):
    """Forgetting B of A <- B <- C while a use-count bump of C takes the expired lease over: the forget
    finds its lease gone before its second bulk and takes its tombstone back (no half-mended chain)."""
    monkeypatch.setattr(os_client, "LEASE_TTL_MS", 300)
    a = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Leith"))
    b = fact("sarah", "Sarah lives in Porto", supersedes=a.id)
    put(store, embedder, "sarah", b, supersede={b.id: Supersession(a.id, False, T0)})
    c = fact("sarah", "Sarah lives in Lisbon", supersedes=b.id)
    put(store, embedder, "sarah", c, supersede={c.id: Supersession(b.id, False, T0)})
    stall_after_creates(monkeypatch, 1.0)  # stalls past the lease's TTL between its two bulks
    raised: list[BaseException] = []

    def forget():
        try:
            store.forget("sarah", b.id, T0)
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=forget)
    t.start()
    time.sleep(0.5)
    store.record_use("sarah", {c.id: 1}, T0)  # takes the expired lease over, bumps C
    t.join()
    assert len(raised) == 1 and isinstance(raised[0], Conflict), raised
    rows = {m.id: m for m in store.fetch("sarah", [a.id, b.id, c.id])}
    assert set(rows) == {a.id, b.id, c.id}
    assert store.tombstones("sarah") == []
    assert rows[a.id].superseded_by == b.id and rows[c.id].supersedes == b.id
    assert rows[c.id].use_count == 1


def test_a_long_unit_renews_its_lease(store, embedder, monkeypatch):
    """A unit of work that runs past the lease's TTL but keeps it stamped is not taken over."""
    monkeypatch.setattr(os_client, "LEASE_TTL_MS", 1000)
    f = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    g = put(store, embedder, "sarah", fact("sarah", "Sarah likes cake"))
    real_commit = OpenSearchRows.commit

    def slow_commit(self):
        time.sleep(0.6)  # past half the TTL: the commit stamps the lease again before it sends
        real_commit(self)

    monkeypatch.setattr(OpenSearchRows, "commit", slow_commit)
    stall_after_creates(monkeypatch, 0.7)
    forgot: list[object] = []
    t = threading.Thread(target=lambda: forgot.append(store.forget("sarah", f.id, T0)))
    t.start()
    time.sleep(1.15)  # past the TTL counted from the lease's creation, not from its renewal
    with pytest.raises(StoreBusy):
        store.record_use("sarah", {g.id: 1}, T0, max_wait_s=0.05)
    t.join()
    assert forgot and store.fetch("sarah", [f.id]) == []
    held = store._client.get(index=store.names.store, id="lock:sarah", ignore=404)
    assert not held.get("found")  # released at its renewed version


# -- I2 / I3: the tenants' role ----------------------------------------------------------------------


def test_a_role_without_its_mapping_is_repaired_on_open(store, embedder, opensearch_node):
    row = put(store, embedder, "sarah", fact("sarah", "Sarah likes tea"))
    path = f"/_plugins/_security/api/rolesmapping/{store.names.role}"
    assert opensearch_node.request("DELETE", path)[0] == 200
    again = OpenSearchStore(
        f"opensearchs://{store.endpoint.host}:{store.endpoint.port}",
        OpenSearchOptions(**store.options.__dict__),
    )
    try:
        assert [m.id for m in again.list_memories("sarah", "semantic")] == [row.id]
    finally:
        again.close()


def test_the_role_grants_this_stores_indices_only():
    names, other = Names("engram_"), Names("engram_memoriesx_")
    patterns = [p for grant in tenant_role(names)["index_permissions"] for p in grant["index_patterns"]]
    for kind in ("memories", "tombstones"):
        assert any(fnmatch.fnmatch(names.concrete(kind, 3), p) for p in patterns)
        assert not any(fnmatch.fnmatch(other.concrete(kind), p) for p in patterns)


# -- Q2 ----------------------------------------------------------------------------------------------


def test_a_racing_revoke_returns_false(store, monkeypatch):
    from engram.storage.base import ApiKeyRecord

    store.add_key(ApiKeyRecord(id="k1", user_id="sarah", label="", created_at=T0, revoked_at=None), "h1")
    real_search = OpenSearchMeta._search
    stale = list(real_search(store._meta(), {"term": {"id": "k1"}}, [{"created_at": "asc"}]))
    assert store.revoke_key("k1", T0) is True
    monkeypatch.setattr(OpenSearchMeta, "_search", lambda self, query, sort: iter(stale))
    assert store.revoke_key("k1", T0) is False  # the other caller revoked it between read and write


def test_a_refused_index_creation_is_reported(store, embedder, monkeypatch):
    real = os_store.index_body

    def bad(kind, dim, shards, replicas):
        body = real(kind, dim, shards, replicas)
        body["mappings"]["properties"]["id"] = {"type": "no_such_type"}
        return body

    monkeypatch.setattr(os_store, "index_body", bad)
    store._memories_ready = False
    store._client.indices.delete(index=store.names.concrete("memories"))
    with pytest.raises(StorageError, match="400"):
        store.ensure_model(embedder.name, embedder.dim)
